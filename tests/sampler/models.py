"""Small random AO-GPTs for the sampler tests (CPU, float32, deterministic weights).

Weights are scaled up so the next-token distributions are far from uniform: a cache bug then
changes sampled tokens, not just the 5th decimal of near-equal logits.
"""

from __future__ import annotations

import torch

from aogpt_plugin.model import AOGPT, AOGPTModelArgs


def build_model(conditioning: str = "adaln", vocab_size: int = 61, max_seq_len: int = 40, scale: float = 8.0, seed=0):
    args = AOGPTModelArgs(
        dim=64, n_layers=2, n_heads=2, vocab_size=vocab_size, max_seq_len=max_seq_len, conditioning=conditioning
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
