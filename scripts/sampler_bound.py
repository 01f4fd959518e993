"""The hardware bound of a sampler step on a GPU: how fast AO-GPT's cached T=n step and the encoder-only
MDM's full forward can be, and so the largest encoder/AO ratio at T=n (arithmetic, no measurement).

    python scripts/sampler_bound.py [--gpu h100|h200] [--flavors small,medium] [--n 1024,256] [--batch 1,8,32]
        [--kernels 154] [--launch-us 2.4]

An AO step at T=n reads every block Linear and the LM head once (bf16) plus each sample's live KV cache
(on average n/2 slots over a generation: a block-sparse kernel skips the rest); its FLOPs (2 per weight
per row) are negligible, so it is bandwidth-bound. The encoder's forward over B x n tokens is compute-bound:
2 FLOPs per block weight per token plus 4 n^2 d per layer for attention (the bench heads only the rows it
draws; "+head" counts the head on all n positions, as a real MDM does). Each time is the larger of compute
and weight-read time. adaLN is read as one table row per block and slot (the decode view), so it is left out.

Two floors beside the memory bound. The launch floor: a step replayed from a CUDA graph still runs its
kernels one after another, each at least ~2.4 us (`--launch-us`: the 2026-11-27 batch-1 step, 0.988 ms over
its 405 launches), so `--kernels` (default 154: the compiled `small` T=n step on an H200, 2026-11-28) x 2.4 us
bounds a step from below whatever its bytes. The T=n/4 step: 4 tokens drawn a step, 8 query slots (4 pending
+ 4 - 1, bucketed to 8), the same bytes and 8x the rows; AR's step is taken as AO's T=n one (the same weights
and cache; `--graphs on` runs it with 2 kernels a layer fewer), so AR/AO(T=n/4) at the floors is 4 x the T=n
floor over the T=n/4 floor. Each step's floor is the larger of its bound and the launch floor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aogpt_plugin.model import FLAVORS  # noqa: E402

GPUS = {  # memory bandwidth (bytes/s), dense bf16 peak (FLOP/s)
    "h100": (3.35e12, 989e12),
    "h200": (4.8e12, 989e12),
}
BF16 = 2
LAUNCH_US = 2.4  # a kernel's least time inside a CUDA graph (the 2026-11-27 batch-1 step: 0.988 ms, 405 launches)
KERNELS = 154  # the compiled `small` T=n step's kernels (H200, 2026-11-28, docs/benchmarks.md)
QUARTER_WIDTH, QUARTER_ROWS = 8, 4  # a T=n/4 step's query slots (4 pending + 4 - 1, bucketed) and rows drawn


def bound(flavor: str, n: int, batch: int, gpu: str, kernels: int = KERNELS, launch_us: float = LAUNCH_US) -> dict:
    a = FLAVORS[flavor]
    bandwidth, peak = GPUS[gpu]
    block_params = a.n_layers * (4 + 2 * a.mlp_ratio) * a.dim * a.dim
    head_params = a.dim * a.padded_vocab_size
    kv_per_slot = a.n_layers * 2 * a.dim * BF16
    ao_bytes = (block_params + head_params) * BF16 + batch * kv_per_slot * n / 2
    ao_flops = 2 * (block_params + head_params) * batch
    ao_seconds = max(ao_bytes / bandwidth, ao_flops / peak)
    encoder_flops = batch * (2 * block_params * n + 4 * n * n * a.dim * a.n_layers)
    head_flops = batch * 2 * head_params * n
    encoder_seconds = max(encoder_flops / peak, block_params * BF16 / bandwidth)
    encoder_head_seconds = max((encoder_flops + head_flops) / peak, (block_params + head_params) * BF16 / bandwidth)
    quarter_flops = 2 * batch * (block_params * QUARTER_WIDTH + head_params * QUARTER_ROWS)
    quarter_seconds = max(ao_bytes / bandwidth, quarter_flops / peak)
    launch_seconds = kernels * launch_us * 1e-6
    ao_floor, quarter_floor = max(ao_seconds, launch_seconds), max(quarter_seconds, launch_seconds)
    return {
        "flavor": flavor,
        "n": n,
        "batch": batch,
        "ao_mb": ao_bytes / 1e6,
        "ao_us": ao_seconds * 1e6,
        "encoder_us": encoder_seconds * 1e6,
        "encoder_head_us": encoder_head_seconds * 1e6,
        "ratio": encoder_seconds / ao_seconds,
        "ratio_head": encoder_head_seconds / ao_seconds,
        "launch_us": launch_seconds * 1e6,
        "ao_floor_us": ao_floor * 1e6,
        "quarter_us": quarter_seconds * 1e6,
        "quarter_floor_us": quarter_floor * 1e6,
        "ratio_floor": encoder_seconds / ao_floor,
        "ar_quarter_floor": 4 * ao_floor / quarter_floor,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", choices=tuple(GPUS), default="h100")
    p.add_argument("--flavors", default="small,medium")
    p.add_argument("--n", default="1024,256")
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--kernels", type=int, default=KERNELS, help=f"kernels of a step (default {KERNELS})")
    p.add_argument("--launch-us", type=float, default=LAUNCH_US, help=f"a kernel's least us in a graph ({LAUNCH_US})")
    args = p.parse_args(argv)
    if args.kernels < 1 or args.launch_us <= 0:
        p.error(f"--kernels {args.kernels} must be >= 1 and --launch-us {args.launch_us} > 0")
    bandwidth, peak = GPUS[args.gpu]
    print(
        f"{args.gpu}: {bandwidth / 1e12:.2f} TB/s, {peak / 1e12:.0f} TFLOP/s dense bf16; launch floor "
        f"{args.kernels} kernels x {args.launch_us} us = {args.kernels * args.launch_us:.0f} us a step"
    )
    print(
        "| model, n | batch | AO step MB -> us | AO step floor us | T=n/4 step us (floor) | encoder forward us "
        "(+head) | encoder/AO at T=n (+head) | at the floor | AR/AO(T=n/4) at the floors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for flavor in args.flavors.split(","):
        for n in (int(v) for v in args.n.split(",")):
            for batch in (int(v) for v in args.batch.split(",")):
                b = bound(flavor, n, batch, args.gpu, args.kernels, args.launch_us)
                print(
                    f"| {flavor}, {n} | {batch} | {b['ao_mb']:.1f} -> {b['ao_us']:.1f} | {b['ao_floor_us']:.0f} | "
                    f"{b['quarter_us']:.1f} ({b['quarter_floor_us']:.0f}) | {b['encoder_us']:,.0f} "
                    f"({b['encoder_head_us']:,.0f}) | {b['ratio']:.1f}x ({b['ratio_head']:.1f}x) | "
                    f"{b['ratio_floor']:.1f}x | {b['ar_quarter_floor']:.2f}x |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
