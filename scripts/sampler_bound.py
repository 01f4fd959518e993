"""The hardware bound of a sampler step on a GPU: how fast AO-GPT's cached T=n step and the encoder-only
MDM's full forward can be, and so the largest encoder/AO ratio at T=n (arithmetic, no measurement).

    python scripts/sampler_bound.py [--gpu h100|h200] [--flavors small,medium] [--n 1024,256] [--batch 1,8,32]

An AO step at T=n reads every block Linear and the LM head once (bf16) plus each sample's live KV cache
(on average n/2 slots over a generation: a block-sparse kernel skips the rest); its FLOPs (2 per weight
per row) are negligible, so it is bandwidth-bound. The encoder's forward over B x n tokens is compute-bound:
2 FLOPs per block weight per token plus 4 n^2 d per layer for attention (the bench heads only the rows it
draws; "+head" counts the head on all n positions, as a real MDM does). Each time is the larger of compute
and weight-read time. adaLN is read as one table row per block and slot (the decode view), so it is left out.
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


def bound(flavor: str, n: int, batch: int, gpu: str) -> dict:
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
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", choices=tuple(GPUS), default="h100")
    p.add_argument("--flavors", default="small,medium")
    p.add_argument("--n", default="1024,256")
    p.add_argument("--batch", default="1,8,32")
    args = p.parse_args(argv)
    bandwidth, peak = GPUS[args.gpu]
    print(f"{args.gpu}: {bandwidth / 1e12:.2f} TB/s, {peak / 1e12:.0f} TFLOP/s dense bf16")
    print("| model, n | batch | AO step MB -> us | encoder forward us (+head) | encoder/AO at T=n (+head) |")
    print("|---|---|---|---|---|")
    for flavor in args.flavors.split(","):
        for n in (int(v) for v in args.n.split(",")):
            for batch in (int(v) for v in args.batch.split(",")):
                b = bound(flavor, n, batch, args.gpu)
                print(
                    f"| {flavor}, {n} | {batch} | {b['ao_mb']:.1f} -> {b['ao_us']:.1f} | "
                    f"{b['encoder_us']:,.0f} ({b['encoder_head_us']:,.0f}) | {b['ratio']:.1f}x ({b['ratio_head']:.1f}x) |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
