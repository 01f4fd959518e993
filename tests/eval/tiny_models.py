"""Small models built in the tests: random weights, scaled up so distributions are far from uniform."""

from __future__ import annotations

from aogpt_plugin.model import AOGPT


def build_model(
    vocab_size: int = 97,
    max_seq_len: int = 48,
    conditioning: str = "adaln",
    dim: int = 64,
    seed: int = 0,
    scale: float = 15.0,
) -> AOGPT:
    """A random AOGPT whose weights are multiplied by `scale` (init std 0.02 gives near-uniform logits)."""
    from conftest import tiny_model

    model = tiny_model(
        conditioning, seed, scale, dim=dim, n_layers=2, n_heads=4, vocab_size=vocab_size, max_seq_len=max_seq_len
    )
    return model.eval().requires_grad_(False)
