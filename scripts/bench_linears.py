"""Time one decode step's Linears (blocks + LM head of a flavor) over a few rows, per CPU kernel.

    python scripts/bench_linears.py --flavor small --rows 1,2,4,7,8,16 --threads 2
    python scripts/bench_linears.py --flavor small --rows 1,2,4,7,8,16 --threads 2 --kernels aten,onednn,mkl

A benchmark, not a test. The weights are random and distinct per layer, laid out as the sampler's
decode view runs them (wqkv, wo, w1, w2 per block, then the head; adaLN is a table lookup there),
so a pass streams all of them from memory as a real step does. Prints milliseconds per pass
(median over --passes rounds after a warm-up round; every round times each row count with every
kernel in turn) and each kernel's cost relative to its own pass at the first row count (1 by default):
the number that decides how much a T=n/4 step (2b-1 = 7 rows) costs against an AR step (1 row).

Kernels: aten (addmm, what nn.Linear runs), onednn (the sampler's PackedLinear), mkl (MKL's packed
sgemm, `torch.ops.mkl._mkl_linear`, with weights packed for each row count).
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

from aogpt_plugin.model import FLAVORS  # noqa: E402
from aogpt_plugin.sampler.decoder import PackedLinear  # noqa: E402

KERNELS = ("aten", "onednn", "mkl")


def decode_linear_shapes(flavor: str) -> list[tuple[int, int]]:
    """(in, out) of every Linear a decode step runs, in order."""
    a = FLAVORS[flavor]
    block = [(a.dim, 3 * a.dim), (a.dim, a.dim), (a.dim, a.mlp_ratio * a.dim), (a.mlp_ratio * a.dim, a.dim)]
    return block * a.n_layers + [(a.dim, a.padded_vocab_size)]


def kernel_available(kernel: str) -> bool:
    if kernel == "onednn":
        return torch.backends.mkldnn.is_available()
    if kernel == "mkl":
        return torch.backends.mkl.is_available()
    return True


def kernel_pass(kernel: str, linears: list[nn.Linear], rows: int, onednn: list[PackedLinear]):
    """A function that runs every Linear on its own input of `rows` rows with `kernel`
    (`onednn`: the Linears packed once, shared by every row count)."""
    xs = [torch.randn(rows, lin.in_features) for lin in linears]
    if kernel == "aten":
        return lambda: [lin(x) for lin, x in zip(linears, xs, strict=True)]
    if kernel == "onednn":
        return lambda: [lin(x) for lin, x in zip(onednn, xs, strict=True)]
    ws = [(torch.ops.mkl._mkl_reorder_linear_weight(lin.weight, rows), lin.weight, lin.bias) for lin in linears]
    return lambda: [torch.ops.mkl._mkl_linear(x, p, w, b, rows) for (p, w, b), x in zip(ws, xs, strict=True)]


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def bench(flavor: str, rows: list[int], passes: int, kernels: list[str]) -> dict:
    """Median ms per pass; row counts and kernels interleaved in every round, so drift hits all."""
    torch.manual_seed(0)
    with torch.no_grad():
        linears = [nn.Linear(i, o).requires_grad_(False) for i, o in decode_linear_shapes(flavor)]
        onednn = [PackedLinear(lin.weight, lin.bias) for lin in linears] if "onednn" in kernels else []
        runs = {m: {k: kernel_pass(k, linears, m, onednn) for k in kernels} for m in rows}
        times = {m: {k: [] for k in kernels} for m in rows}
        for round_ in range(passes + 1):  # round 0 warms up
            for m, per_kernel in runs.items():
                for k, run in per_kernel.items():
                    ms = timed(run)
                    if round_:
                        times[m][k].append(ms)
    ms = {m: {k: round(statistics.median(v), 2) for k, v in per.items()} for m, per in times.items()}
    weights_mb = sum(lin.weight.numel() for lin in linears) * 4 / 1e6
    return {"flavor": flavor, "kernels": kernels, "weights_mb": round(weights_mb, 1), "ms": ms}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flavor", default="small", choices=sorted(FLAVORS))
    p.add_argument("--rows", default="1,2,4,7,8,16", help="comma-separated row counts (default 1,2,4,7,8,16)")
    p.add_argument("--passes", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads")
    p.add_argument("--kernels", default="aten,onednn", help=f"comma list of {', '.join(KERNELS)} (default aten,onednn)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    kernels = [k for k in args.kernels.split(",") if k]
    bad = [k for k in kernels if k not in KERNELS]
    if bad or not kernels:
        p.error(f"--kernels {args.kernels!r} is not a comma list of {', '.join(KERNELS)}")
    missing = [k for k in kernels if not kernel_available(k)]
    if missing:
        p.error(f"--kernels {missing[0]!r} is not built into this torch; leave it out")
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        p.error(f"--rows {args.rows!r} is not a comma-separated list of integers")
    if any(r < 1 for r in rows) or args.passes < 1:
        p.error(f"--rows {args.rows!r} and --passes {args.passes} must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = bench(args.flavor, rows, args.passes, kernels)
    result["threads"] = torch.get_num_threads()
    if args.json:
        print(json.dumps(result))
        return 0
    ms = result["ms"]
    print(
        f"{args.flavor}: {len(decode_linear_shapes(args.flavor))} Linears, {result['weights_mb']} MB, "
        f"{result['threads']} threads; ms per pass (x its own pass at {rows[0]} rows)"
    )
    print("| rows | " + " | ".join(kernels) + " |\n|---|" + "---|" * len(kernels))
    first = ms[rows[0]]
    for m in rows:
        cells = [f"{ms[m][k]:.1f} ms ({ms[m][k] / first[k]:.2f}x)" for k in kernels]
        print(f"| {m} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
