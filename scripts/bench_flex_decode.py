"""Time FlexAttention's decode kernel at one static-step shape, per BlockMask layout and SPLIT_KV.

    python scripts/bench_flex_decode.py                     # a GPU: `small` at n=1024, batch 32, cache half full
    python scripts/bench_flex_decode.py --batch 1           # the batch-1 step
    python scripts/bench_flex_decode.py --batch 2 --heads 2 --slots 65 --filled 30 --rounds 1 --calls 2   # a CPU

A benchmark, not a test. It runs what one layer of the AO sampler's T=n step attends with: one query
slot per sample against a (B, heads, slots, head_dim) cache filled to `--filled`, under the step's
BlockMask (sampler/masks.py: step_block_mask), compiled per variant:

  layout full     the step's mask today: blocks inside the shared cache listed as full, the last as
                  partial. FlexDecoding then tiles the whole cache over its SPLIT_KV programs per row.
  layout partial  every touched block partial (`full_blocks=False`): FlexDecoding tiles only the
                  touched blocks, evenly over its SPLIT_KV programs.
  split default   torch's SPLIT_KV (2 x SMs / (batch x heads), at least 1: 1 at batch 32 on an H200);
  split K         SPLIT_KV = K (`kernel_options`).

Why: on an H200 (2026-11-28, docs/benchmarks.md) a layer's attention took 25.3 us of the 851 us compiled
step at batch 32 with the cache half full, the time of reading the whole cache (21 us at 4.8 TB/s)
against 10.5 us for its filled half. Every round times each variant in turn (`--calls` calls between
two device syncs); a variant's microseconds per call are the median over rounds [min, max], and its
ratio to the first variant is the median of the per-round ratios [min, max], after an untimed round
of the same calls. Each variant's output is
checked against the first's (max |difference|, printed): a layout or split changes no result beyond
rounding. A variant that fails to compile or run is a row with its error, the others are still timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aogpt_plugin.sampler.graphs import raise_compile_limits  # noqa: E402
from aogpt_plugin.sampler.masks import FlexStepMask, step_block_mask  # noqa: E402

LAYOUTS = ("full", "partial")


def variants(layouts: list[str], splits: list[str]) -> list[tuple[str, str]]:
    return [(layout, split) for layout in layouts for split in splits]


def attend_fn(device: torch.device, layout: str, split: str, batch: int, slots: int, filled: int):
    """The compiled attention of one variant and its BlockMask (every sample's cache filled to `filled`,
    one pending slot, a step of width 1: the T=n step)."""
    from torch.nn.attention.flex_attention import flex_attention

    masks = FlexStepMask(batch, device)  # its per-sample tensors and the mask_mod that reads them
    masks.cache_len.fill_(filled)
    masks.pending.fill_(1)
    masks.width.fill_(1)
    block_mask = step_block_mask(
        masks.cache_len, masks.pending, masks.width, 1, slots, masks.mask_mod, full_blocks=layout == "full"
    )
    options = {} if split == "default" else {"SPLIT_KV": int(split)}
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, kernel_options=options or None)


def bench(args, device: torch.device, dtype: torch.dtype) -> dict:
    raise_compile_limits()
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.slots, args.head_dim)
    q = torch.randn(args.batch, args.heads, 1, args.head_dim, generator=g).to(device, dtype)
    k, v = (torch.randn(*shape, generator=g).to(device, dtype) for _ in "kv")
    runs, outputs, failed = {}, {}, {}
    for key in variants(args.layouts, args.splits):  # compiles every variant; one that fails is reported
        try:
            run = attend_fn(device, *key, args.batch, args.slots, args.filled)
            outputs[key] = run(q, k, v)
            runs[key] = run
        except Exception as error:  # a kernel option this torch rejects costs one row, not the run
            failed[key] = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"
    if not runs:
        raise SystemExit(f"error: no variant ran; the first failed with {next(iter(failed.values()))}")
    first = next(iter(runs))
    diffs = {key: float((out.float() - outputs[first].float()).abs().max()) for key, out in outputs.items()}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rounds: list[dict] = []
    for round_ in range(args.rounds + 1):  # round 0 warms up
        this_round = {}
        for key, run in runs.items():
            sync()
            start = time.perf_counter()
            for _ in range(args.calls):
                run(q, k, v)
            sync()
            this_round[key] = (time.perf_counter() - start) / args.calls * 1e6
        if round_:
            rounds.append(this_round)
    rows = []
    for key in runs:
        us = [r[key] for r in rounds]
        ratios = [r[key] / r[first] for r in rounds]
        rows.append({
            "layout": key[0], "split": key[1], "us_per_call": round(statistics.median(us), 2),
            "us_range": [round(min(us), 2), round(max(us), 2)], "vs_first": round(statistics.median(ratios), 3),
            "vs_first_range": [round(min(ratios), 3), round(max(ratios), 3)], "max_abs_diff": diffs[key],
        })  # fmt: skip
    rows += [{"layout": key[0], "split": key[1], "error": message} for key, message in failed.items()]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    command = "python scripts/bench_flex_decode.py " + " ".join(sys.argv[1:])
    return {"command": command.strip(), "device": name, "dtype": str(dtype).removeprefix("torch."),
            "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim, "slots": args.slots,
            "filled": args.filled, "rounds": args.rounds, "calls": args.calls, "variants": rows}  # fmt: skip


def comma_list(text: str, allowed: tuple[str, ...] | None, what: str, p: argparse.ArgumentParser) -> list[str]:
    items = [x for x in text.split(",") if x]
    ok = items and all(x in allowed if allowed else (x == "default" or (x.isdigit() and int(x) >= 1)) for x in items)
    if not ok:
        p.error(
            f"{what} {text!r} is not a comma list of "
            + (", ".join(allowed) if allowed else "default and integers >= 1")
        )
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--slots", type=int, default=1025, help="cache slots (n + 1 for n positions; default 1025)")
    p.add_argument("--filled", type=int, default=508, help="cache slots already written (default 508: half)")
    p.add_argument("--layouts", default="full,partial", help="comma list of full, partial (default both)")
    p.add_argument("--splits", default="default,2,4,8,16", help="comma list of default and SPLIT_KV values")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--calls", type=int, default=200, help="calls per variant per round (default 200)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.layouts = comma_list(args.layouts, LAYOUTS, "--layouts", p)
    args.splits = comma_list(args.splits, None, "--splits", p)
    sizes = {"--batch": args.batch, "--heads": args.heads, "--head-dim": args.head_dim, "--slots": args.slots,
             "--rounds": args.rounds, "--calls": args.calls}  # fmt: skip
    for flag, value in sizes.items():
        if value < 1:
            p.error(f"{flag} {value} must be >= 1")
    if not 0 <= args.filled < args.slots:
        p.error(
            f"--filled {args.filled} must be in 0 .. {args.slots - 1} (--slots {args.slots} holds the new slot too)"
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    result = bench(args, device, dtype)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"flex decode on {result['device']} ({result['dtype']}): batch {args.batch}, {args.heads} heads of "
        f"{args.head_dim}, {args.slots} slots, {args.filled} filled; median of {args.rounds} rounds of {args.calls} calls"
    )
    print("| layout | SPLIT_KV | us per call [min, max] | vs first [min, max] | max abs diff |\n|---|---|---|---|---|")
    for r in result["variants"]:
        if "error" in r:
            print(f"| {r['layout']} | {r['split']} | failed: {r['error']} | | |")
            continue
        lo, hi = r["us_range"]
        rlo, rhi = r["vs_first_range"]
        print(
            f"| {r['layout']} | {r['split']} | {r['us_per_call']:.2f} [{lo:.2f}, {hi:.2f}] | "
            f"{r['vs_first']:.3f} [{rlo:.3f}, {rhi:.3f}] | {r['max_abs_diff']:.2e} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
