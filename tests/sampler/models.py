"""Small random AO-GPTs for the sampler tests (CPU, float32, deterministic weights).

Weights are scaled up so the next-token distributions are far from uniform: a cache bug then
changes sampled tokens, not just the 5th decimal of near-equal logits.
"""

from __future__ import annotations

import pytest
import torch

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def build_model(conditioning: str = "adaln", vocab_size: int = 61, max_seq_len: int = 40, scale: float = 8.0, seed=0):
    from conftest import tiny_model

    model = tiny_model(
        conditioning, seed, scale, dim=64, n_layers=2, n_heads=2, vocab_size=vocab_size, max_seq_len=max_seq_len
    )
    return model.eval().requires_grad_(False)
