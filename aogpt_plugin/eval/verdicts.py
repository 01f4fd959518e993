"""Whether a measured difference reproduces a claim: the rule the findings study applies by code.

A variant is measured by R runs (seeds), run r giving an estimate m_r with an evaluation standard
error s_r (over held-out windows, orders or samples). The variant's standard error is

    se^2 = max(var_r(m_r) / R, mean_r(s_r^2) / R)     for R >= 2,     se^2 = s_1^2 for R = 1,

the spread between seeds when it is measured and never below the evaluation noise alone. Two
variants differ by d = m_A - m_B with se_d^2 = se_A^2 + se_B^2. A claim that d has a sign is
**reproduced** only if d has that sign by more than 2 se_d, **contradicted** if the opposite holds,
and **inconclusive** otherwise (the SE is always shown).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"


@dataclass(frozen=True)
class Measurement:
    mean: float
    se: float
    runs: int = 1

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f}"


def measure(means: list[float], ses: list[float]) -> Measurement:
    """One variant from its runs' estimates and evaluation SEs."""
    if not means or len(means) != len(ses):
        raise ValueError("need one SE per run and at least one run")
    r = len(means)
    eval_var = sum(s * s for s in ses) / r / r
    seed_var = statistics.variance(means) / r if r >= 2 else 0.0
    return Measurement(statistics.fmean(means), math.sqrt(max(seed_var, eval_var)), r)


def difference(a: Measurement, b: Measurement) -> Measurement:
    """a - b, independent errors."""
    return Measurement(a.mean - b.mean, math.hypot(a.se, b.se), min(a.runs, b.runs))


def verdict(d: Measurement, expect: str) -> str:
    """`expect` is "negative" (the claim: d < 0, e.g. A's NLL is lower) or "positive"."""
    if expect not in ("negative", "positive"):
        raise ValueError(f"expect={expect!r}; allowed: negative, positive")
    if not d.se > 0:
        return INCONCLUSIVE  # no error estimate (one chunk, one sample): nothing can be claimed
    z = d.mean / d.se
    if expect == "negative":
        z = -z
    return REPRODUCED if z > 2 else CONTRADICTED if z < -2 else INCONCLUSIVE


def verdict_text(d: Measurement, expect: str) -> str:
    """'**reproduced** (difference -0.1234 ± 0.0100, 12.3 SE)' for the report."""
    z = abs(d.mean) / d.se if d.se > 0 else math.inf
    return f"**{verdict(d, expect)}** (difference {d.mean:+.4f} ± {d.se:.4f} SE, |d| = {z:.1f} SE)"
