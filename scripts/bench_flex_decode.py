"""Time FlexAttention's decode kernel at one static-step shape, per `--decode-attention` setting: the BlockMask
layout x SPLIT_KV x num_stages x num_warps.

    python scripts/bench_flex_decode.py                     # a GPU: `small` at n=1024, batch 32, cache half full
    python scripts/bench_flex_decode.py --batch 1           # the batch-1 step
    python scripts/bench_flex_decode.py --batch 2 --heads 2 --slots 128 --filled 30 --rounds 1 --calls 2   # a CPU

A benchmark, not a test. It runs what one layer of the AO sampler's T=n step attends with: one query
slot per sample against a (B, heads, slots, head_dim) cache filled to `--filled`, under the step's
BlockMask (sampler/masks.py: step_block_mask), compiled per variant. A variant is a setting of the
step's FlexAttention (sampler/options.py: DecodeAttention, `aogpt sample --decode-attention`), its row
spelled as that option takes it, so the fastest (`best`) can run end to end:

  layout full     blocks the query sees whole listed as full, the last as partial: FlexDecoding then
                  tiles the whole cache over its SPLIT_KV programs per row, unevenly.
  layout partial  every touched block partial: FlexDecoding tiles only the touched blocks, evenly.
  split, stages, warps   SPLIT_KV, num_stages, num_warps (`default`: torch's; SPLIT_KV's is 2 x SMs /
                  (batch x heads), at least 1: 1 at batch 32 on an H200).

Why: on an H200 (2026-11-28, docs/benchmarks.md) a layer's attention took 25.3 us of the 851 us compiled
step at batch 32 with the cache half full, the time of reading the whole cache (21 us at 4.8 TB/s)
against 10.5 us for its filled half.

The timer times the device. A compiled call costs 30-110 us of host time, more than the ~25 us kernel
at batch 32, so on a GPU each variant's `--calls` calls are captured in one CUDA graph and a round
replays it between two CUDA events (`"timer": "graph"`); on a CPU there is no device to time apart and
the host times the calls (`"timer": "host"`). Every round times each variant in turn; a variant's
microseconds per call are the median over rounds [min, max], its ratio to the first variant the median
of the per-round ratios [min, max], after an untimed round. Each variant's output is checked against
the first's (max |difference|): a setting changes no result beyond rounding. A variant that fails to
compile or run is a row with its error; one past the `--budget` of compile seconds is a row that says
so; the others are still timed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aogpt_plugin.errors import UserError  # noqa: E402
from aogpt_plugin.sampler.choices import parse_decode_attention  # noqa: E402
from aogpt_plugin.sampler.graphs import raise_compile_limits  # noqa: E402
from aogpt_plugin.sampler.masks import FlexStepMask, step_block_mask  # noqa: E402
from aogpt_plugin.sampler.options import DECODE_LAYOUTS, DecodeAttention  # noqa: E402
from aogpt_plugin.sampler.static import static_slots  # noqa: E402


def variants(layouts: list[str], splits: list[str], stages: list[str], warps: list[str]) -> list[DecodeAttention]:
    """Every setting of the product, in its order (the first is the reference), each checked as
    `--decode-attention` checks it."""
    settings = []
    for layout, split, stage, warp in itertools.product(layouts, splits, stages, warps):
        knobs = [f"{key}={value}" for key, value in (("split", split), ("stages", stage), ("warps", warp))]
        settings.append(parse_decode_attention(",".join([layout, *(k for k in knobs if not k.endswith("=default"))])))
    return settings


def attend_fn(device: torch.device, setting: DecodeAttention, batch: int, slots: int, filled: int):
    """The compiled attention of one setting and its BlockMask (every sample's cache filled to `filled`,
    one pending slot, a step of width 1: the T=n step)."""
    from torch.nn.attention.flex_attention import flex_attention

    masks = FlexStepMask(batch, device)  # its per-sample tensors and the mask_mod that reads them
    masks.cache_len.fill_(filled)
    masks.pending.fill_(1)
    masks.width.fill_(1)
    block_mask = step_block_mask(
        masks.cache_len, masks.pending, masks.width, 1, slots, masks.mask_mod, full_blocks=setting.full_blocks
    )
    compiled = torch.compile(flex_attention, dynamic=False)
    options = setting.kernel_options()
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, kernel_options=options)


def graph_timer(run, args: tuple, calls: int, device: torch.device):
    """`calls` calls of run(*args) captured in one CUDA graph; the returned function replays it between two
    CUDA events and gives the device's microseconds per call."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        run(*args)  # capture needs a warm call on its stream
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            run(*args)

    def timed() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / calls

    return timed


def host_timer(run, args: tuple, calls: int):
    """The host's microseconds per call of `calls` calls of run(*args) (a CPU: the work is the host's)."""

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            run(*args)
        return (time.perf_counter() - start) / calls * 1e6

    return timed


def _row(setting: DecodeAttention) -> dict:
    knobs = {key: getattr(setting, key) or "default" for key in ("split", "stages", "warps")}
    return {"decode_attention": str(setting), "layout": setting.layout, **knobs}


def bench(args, device: torch.device, dtype: torch.dtype) -> dict:
    raise_compile_limits()
    settings = variants(args.layouts, args.splits, args.stages, args.warps)
    config = torch._dynamo.config  # a recompile per setting (kernel options are guarded constants)
    config.recompile_limit = max(config.recompile_limit, len(settings) + 8)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * (len(settings) + 8))
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.slots, args.head_dim)
    q = torch.randn(args.batch, args.heads, 1, args.head_dim, generator=g).to(device, dtype)
    k, v = (torch.randn(*shape, generator=g).to(device, dtype) for _ in "kv")
    timers, outputs, failed = {}, {}, {}
    started = time.monotonic()  # the compile budget's clock
    for setting in settings:  # compiles every setting within the budget; one that fails is reported
        if time.monotonic() - started > args.budget:
            failed[setting] = ("skipped", f"past the --budget of {args.budget} s of compiling")
            continue
        try:
            run = attend_fn(device, setting, args.batch, args.slots, args.filled)
            outputs[setting] = run(q, k, v)
            on_gpu = device.type == "cuda"
            timers[setting] = (
                graph_timer(run, (q, k, v), args.calls, device) if on_gpu else host_timer(run, (q, k, v), args.calls)
            )
        except Exception as error:  # a kernel option this torch rejects costs one row, not the run
            failed[setting] = ("error", f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}")
    if not timers:
        raise SystemExit(f"error: no variant ran; the first failed with {next(iter(failed.values()))[1]}")
    first = next(iter(timers))
    diffs = {s: float((out.float() - outputs[first].float()).abs().max()) for s, out in outputs.items()}
    rounds: list[dict] = []
    for round_ in range(args.rounds + 1):  # round 0 warms up
        this_round = {s: timed() for s, timed in timers.items()}
        if round_:
            rounds.append(this_round)
    rows = []
    for setting in settings:
        if setting in failed:
            rows.append({**_row(setting), failed[setting][0]: failed[setting][1]})
            continue
        us = [r[setting] for r in rounds]
        ratios = [r[setting] / r[first] for r in rounds]
        rows.append({
            **_row(setting), "us_per_call": round(statistics.median(us), 2),
            "us_range": [round(min(us), 2), round(max(us), 2)], "vs_first": round(statistics.median(ratios), 3),
            "vs_first_range": [round(min(ratios), 3), round(max(ratios), 3)], "max_abs_diff": diffs[setting],
        })  # fmt: skip
    timed_rows = [r for r in rows if "us_per_call" in r]
    best = min(timed_rows, key=lambda r: r["us_per_call"])["decode_attention"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    command = "python scripts/bench_flex_decode.py " + " ".join(sys.argv[1:])
    return {"command": command.strip(), "device": name, "dtype": str(dtype).removeprefix("torch."),
            "timer": "graph" if device.type == "cuda" else "host", "batch": args.batch, "heads": args.heads,
            "head_dim": args.head_dim, "slots": args.slots, "filled": args.filled, "rounds": args.rounds,
            "calls": args.calls, "compile_seconds": round(time.monotonic() - started, 1), "best": best,
            "variants": rows}  # fmt: skip


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
    step_slots = static_slots(1024)
    p.add_argument(
        "--slots", type=int, default=step_slots, help=f"cache slots (default {step_slots}: the static step's at n=1024)"
    )
    p.add_argument(
        "--filled", type=int, default=508, help="cache slots already written (default 508: step 508 of 1024)"
    )
    p.add_argument("--layouts", default="full,partial", help="comma list of full, partial (default both)")
    p.add_argument("--splits", default="default,2,4,8,16", help="comma list of default and SPLIT_KV values")
    p.add_argument("--stages", default="default,2,3", help="comma list of default and num_stages values")
    p.add_argument("--warps", default="default,4", help="comma list of default and num_warps values")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument(
        "--calls", type=int, default=200, help="calls per variant per round, one CUDA graph on a GPU (default 200)"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=600.0,
        help="seconds of compiling after which the remaining variants are skipped (default 600)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.layouts = comma_list(args.layouts, DECODE_LAYOUTS, "--layouts", p)
    for flag in ("splits", "stages", "warps"):
        setattr(args, flag, comma_list(getattr(args, flag), None, f"--{flag}", p))
    sizes = {"--batch": args.batch, "--heads": args.heads, "--head-dim": args.head_dim, "--slots": args.slots,
             "--rounds": args.rounds, "--calls": args.calls, "--budget": args.budget}  # fmt: skip
    for flag, value in sizes.items():
        if value < 1:
            p.error(f"{flag} {value} must be >= 1")
    if not 0 <= args.filled < args.slots:
        p.error(
            f"--filled {args.filled} must be in 0 .. {args.slots - 1} (--slots {args.slots} holds the new slot too)"
        )
    try:  # each setting as `--decode-attention` checks it, before anything is compiled
        variants(args.layouts, args.splits, args.stages, args.warps)
    except UserError as error:
        p.error(str(error))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    result = bench(args, device, dtype)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"flex decode on {result['device']} ({result['dtype']}, {result['timer']} timer): batch {args.batch}, "
        f"{args.heads} heads of {args.head_dim}, {args.slots} slots, {args.filled} filled; median of "
        f"{args.rounds} rounds of {args.calls} calls; fastest: {result['best']}"
    )
    print("| decode attention | us per call [min, max] | vs first [min, max] | max abs diff |\n|---|---|---|---|")
    for r in result["variants"]:
        if "us_per_call" not in r:
            print(f"| {r['decode_attention']} | {'failed: ' + r['error'] if 'error' in r else r['skipped']} | | |")
            continue
        lo, hi = r["us_range"]
        rlo, rhi = r["vs_first_range"]
        print(
            f"| {r['decode_attention']} | {r['us_per_call']:.2f} [{lo:.2f}, {hi:.2f}] | "
            f"{r['vs_first']:.3f} [{rlo:.3f}, {rhi:.3f}] | {r['max_abs_diff']:.2e} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
