"""Small models built in the tests: random weights, scaled up so distributions are far from uniform."""

from __future__ import annotations

import torch

from aogpt_plugin.model import AOGPT, AOGPTModelArgs


def build_model(
    vocab_size: int = 97,
    max_seq_len: int = 48,
    conditioning: str = "adaln",
    dim: int = 64,
    seed: int = 0,
    scale: float = 15.0,
) -> AOGPT:
    """A random AOGPT whose weights are multiplied by `scale` (init std 0.02 gives near-uniform logits)."""
    args = AOGPTModelArgs(
        dim=dim, n_layers=2, n_heads=4, vocab_size=vocab_size, max_seq_len=max_seq_len, conditioning=conditioning
    )
    with torch.device("meta"):
        model = AOGPT(args)
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(scale)
    return model.eval().requires_grad_(False)
