"""Generation quality of exact speculative sampling vs T = n and T = n/4 parallel sampling, with 2-SE verdicts.

    python scripts/speculative_quality.py --model outputs/study/ao_random_s0/model_ema \
        --scorer outputs/study/ar_s0/model_ema --length 16 --samples 512

Each variant draws --samples samples from --model with `aogpt eval genppl` (same seed, same batch
size) and scores them with --scorer: gen NLL (mean over samples of the per-sample mean NLL, i.e.
log of per-sample gen-PPL) and unigram entropy, each with its standard error over samples. The
speculative sampler draws the T = n distribution exactly, so its gen NLL and entropy must agree
with T = n within 2 SE; T = n/4 draws 4 tokens per step from independent marginals and should not.
Prints a markdown table (docs/benchmarks.md) and, with --json, the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aogpt_plugin.eval.verdicts import Measurement, difference  # noqa: E402


def genppl(model: str, scorer: str, samples: int, length: int, how: list[str], batch: int, seed: int) -> dict:
    cmd = ["aogpt", "eval", "genppl", "--model", model, "--scorer", scorer, "--num-samples", str(samples)]
    cmd += ["--length", str(length), "--batch-size", str(batch), "--seed", str(seed), *how, "--json", "--no-progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", *cmd[1:]], capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    nlls = [math.log(p) for p in record["sample_ppls"]]
    n = len(nlls)
    mean = sum(nlls) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in nlls) / (n - 1))
    return {
        "command": " ".join(cmd),
        "forward_passes": record["samples_meta"]["forward_passes"],
        "batches": math.ceil(samples / batch),
        "gen_nll": Measurement(mean, sd / math.sqrt(n), 1),
        "gen_ppl": math.exp(mean),
        "entropy": Measurement(record["unigram_entropy_mean"], record["unigram_entropy_std"] / math.sqrt(n), 1),
    }


def agreement(d: Measurement) -> str:
    if not d.se > 0:
        return "no SE"
    z = abs(d.mean) / d.se
    return f"within 2 SE ({z:.1f})" if z <= 2 else f"differs ({z:.1f} SE)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="converted AO-GPT folder to sample from")
    p.add_argument("--scorer", required=True, help="converted folder (read left to right) or hf:NAME")
    p.add_argument("--length", type=int, required=True, help="tokens per sample n")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speculative", default="auto", help="draft size K or auto")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers here")
    a = p.parse_args(argv)
    if a.samples < 2:
        print(f"error: --samples {a.samples} is too few; allowed: >= 2 (a standard error needs two)", file=sys.stderr)
        return 2
    n, quarter = a.length, max(1, a.length // 4)
    variants = {
        f"T=n={n}": ["--steps", str(n)],
        f"speculative {a.speculative}": ["--speculative", str(a.speculative)],
        f"T=n/4={quarter}": ["--steps", str(quarter)],
    }
    rows = {name: genppl(a.model, a.scorer, a.samples, n, how, a.batch_size, a.seed) for name, how in variants.items()}
    base = rows[f"T=n={n}"]
    print(
        "| sampler | forwards per batch | gen NLL ± SE | gen PPL | unigram entropy ± SE | NLL vs T=n | entropy vs T=n |"
    )
    print("|---|---|---|---|---|---|---|")
    out = {}
    for name, r in rows.items():
        d_nll, d_ent = difference(r["gen_nll"], base["gen_nll"]), difference(r["entropy"], base["entropy"])
        same = r is base
        print(
            f"| {name} | {r['forward_passes'] / r['batches']:.2f} | {r['gen_nll']} | {r['gen_ppl']:.2f} | {r['entropy']} | "
            f"{'-' if same else f'{d_nll} ({agreement(d_nll)})'} | {'-' if same else f'{d_ent} ({agreement(d_ent)})'} |"
        )
        out[name] = {
            "command": r["command"],
            "forwards_per_batch": r["forward_passes"] / r["batches"],
            "gen_nll": [r["gen_nll"].mean, r["gen_nll"].se],
            "gen_ppl": r["gen_ppl"],
            "entropy": [r["entropy"].mean, r["entropy"].se],
            "nll_vs_t_n": None if same else [d_nll.mean, d_nll.se, agreement(d_nll)],
            "entropy_vs_t_n": None if same else [d_ent.mean, d_ent.se, agreement(d_ent)],
        }
    for name, r in rows.items():
        print(f"- {name}: `{r['command']}`")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
