"""How many positions each of the T steps unmasks (paper §4.3, Eq. 5, Lemma 4.1).

A time grid t_0 = 1 > t_1 > ... > t_T = 0 (linear, or the authors' cosine f(t) = cos((1 - t) pi / 2)
applied to linspace(1, 0, T + 1)) is turned into per-step counts in one of two ways:

  deterministic - the authors' code: n_k = max(floor(N (1 - t_k)), n_{k-1} + 1) tokens known after
                  step k, so every step unmasks at least one token and there are exactly T forwards.
  binomial      - Lemma 4.1: at step k every still-masked position is unmasked independently with
                  probability (t_{k-1} - t_k) / t_{k-1}, so the count is Binomial(#masked, (t - s) / t)
                  and may be 0 (such a step needs no forward pass). The last step (t_T = 0) unmasks
                  everything left. We draw it as one uniform u per position: the position is unmasked
                  at the step k with t_k < u <= t_{k-1}, which has probability t_{k-1} - t_k -- the same
                  law as the step-by-step Bernoulli trials, with N draws instead of N * T.
"""

from __future__ import annotations

import math

import torch

from ..errors import UserError

SCHEDULES = ("linear", "cosine")
COUNTS = ("deterministic", "binomial")


def time_grid(steps: int, schedule: str = "linear") -> torch.Tensor:
    """t_0..t_T in float64, from 1 down to exactly 0."""
    if schedule not in SCHEDULES:
        raise UserError(f"schedule={schedule!r} is not supported; allowed: {', '.join(SCHEDULES)}")
    if steps < 1:
        raise UserError(f"steps={steps} must be >= 1")
    t = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    if schedule == "cosine":
        t = torch.cos((1.0 - t) * (math.pi / 2))
    t[0], t[-1] = 1.0, 0.0  # cos(pi/2) is 6e-17, not 0: without this the last step could leave a token masked
    return t


def deterministic_counts(num_tokens: int, steps: int, schedule: str = "linear") -> torch.Tensor:
    """(T,) tokens unmasked per step, each >= 1, summing to num_tokens (the authors' rule)."""
    if steps > num_tokens:
        raise UserError(
            f"steps={steps} is larger than the {num_tokens} positions to generate; allowed: 1..{num_tokens}"
        )
    t = time_grid(steps, schedule)
    known = [0]
    for k in range(1, steps + 1):
        known.append(max(math.floor(num_tokens * (1.0 - t[k].item())), known[-1] + 1))
    counts = torch.tensor(known[1:], dtype=torch.long) - torch.tensor(known[:-1], dtype=torch.long)
    assert known[-1] == num_tokens, (known[-1], num_tokens)  # holds for T <= N (see module docstring)
    return counts


def binomial_counts(
    num_tokens: int, steps: int, batch: int, schedule: str = "linear", generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, T) per-sample counts under Lemma 4.1; rows sum to num_tokens, entries may be 0."""
    if steps > num_tokens:
        raise UserError(
            f"steps={steps} is larger than the {num_tokens} positions to generate; allowed: 1..{num_tokens}"
        )
    t = time_grid(steps, schedule)
    u = 1.0 - torch.rand(batch, num_tokens, dtype=torch.float64, generator=generator)  # in (0, 1]
    # the step k in 1..T with t_k < u <= t_{k-1}; the grid is decreasing, so search its reverse
    step = steps + 1 - torch.searchsorted(t.flip(0).contiguous(), u, right=False)
    counts = torch.zeros(batch, steps + 1, dtype=torch.long)
    counts.scatter_add_(1, step, torch.ones_like(step))
    return counts[:, 1:]


def step_counts(
    num_tokens: int,
    steps: int,
    batch: int,
    schedule: str = "linear",
    counts: str = "deterministic",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(batch, T) tokens each sample unmasks at each step."""
    if counts == "deterministic":
        return deterministic_counts(num_tokens, steps, schedule).expand(batch, steps).clone()
    if counts == "binomial":
        return binomial_counts(num_tokens, steps, batch, schedule, generator)
    raise UserError(f"counts={counts!r} is not supported; allowed: {', '.join(COUNTS)}")
