"""Time one decode step's Linears (blocks + LM head of a flavor) over a few rows: aten vs oneDNN.

    python scripts/bench_linears.py --flavor small --rows 1,2,4,7,8,16 --threads 2

A benchmark, not a test. The weights are random and distinct per layer, laid out as the sampler's
decode view runs them (wqkv, wo, w1, w2 per block, then the head; adaLN is a table lookup there),
so a pass streams all of them from memory as a real step does. Prints milliseconds per pass
(median over --passes rounds after a warm-up round; every round times each row count with both
kernels in turn) and each kernel's cost relative to its own 1-row pass:
the number that decides how much a T=n/4 step (2b-1 = 7 rows) costs against an AR step (1 row).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aogpt_plugin.model.flavors import FLAVORS  # noqa: E402
from aogpt_plugin.sampler.linears import PackedLinear  # noqa: E402


def decode_linear_shapes(flavor: str) -> list[tuple[int, int]]:
    """(in, out) of every Linear a decode step runs, in order."""
    a = FLAVORS[flavor]
    block = [(a.dim, 3 * a.dim), (a.dim, a.dim), (a.dim, a.mlp_ratio * a.dim), (a.mlp_ratio * a.dim, a.dim)]
    return block * a.n_layers + [(a.dim, a.padded_vocab_size)]


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def bench(flavor: str, rows: list[int], passes: int) -> dict:
    """Median ms per pass; row counts and kernels interleaved in every round, so drift hits all."""
    torch.manual_seed(0)
    shapes = decode_linear_shapes(flavor)
    with torch.no_grad():
        linears = [nn.Linear(i, o).requires_grad_(False) for i, o in shapes]
        packed = [PackedLinear(lin) for lin in linears]
    runs = {}
    for m in rows:
        xs = [torch.randn(m, i) for i, _ in shapes]
        runs[m] = {
            "aten": lambda xs=xs: [lin(x) for lin, x in zip(linears, xs, strict=True)],
            "onednn": lambda xs=xs: [lin(x) for lin, x in zip(packed, xs, strict=True)],
        }
    times = {m: {k: [] for k in kernels} for m, kernels in runs.items()}
    for round_ in range(passes + 1):  # round 0 warms up
        for m, kernels in runs.items():
            for k, run in kernels.items():
                ms = timed(run)
                if round_:
                    times[m][k].append(ms)
    ms = {m: {k: round(statistics.median(v), 2) for k, v in per.items()} for m, per in times.items()}
    weights_mb = sum(lin.weight.numel() for lin in linears) * 4 / 1e6
    return {"flavor": flavor, "weights_mb": round(weights_mb, 1), "ms": ms}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flavor", default="small", choices=sorted(FLAVORS))
    p.add_argument("--rows", default="1,2,4,7,8,16", help="comma-separated row counts (default 1,2,4,7,8,16)")
    p.add_argument("--passes", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        p.error(f"--rows {args.rows!r} is not a comma-separated list of integers")
    if any(r < 1 for r in rows) or args.passes < 1:
        p.error(f"--rows {args.rows!r} and --passes {args.passes} must be >= 1")
    if not torch.backends.mkldnn.is_available():
        p.error("this torch has no oneDNN; nothing to compare")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = bench(args.flavor, rows, args.passes)
    result["threads"] = torch.get_num_threads()
    if args.json:
        print(json.dumps(result))
        return 0
    ms = result["ms"]
    print(
        f"{args.flavor}: {len(decode_linear_shapes(args.flavor))} Linears, {result['weights_mb']} MB, "
        f"{result['threads']} threads; ms per pass (x its own 1-row pass)"
    )
    print("| rows | aten | oneDNN packed |\n|---|---|---|")
    first = ms[rows[0]]
    for m in rows:
        cells = [f"{ms[m][k]:.1f} ms ({ms[m][k] / first[k]:.2f}x)" for k in ("aten", "onednn")]
        print(f"| {m} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
