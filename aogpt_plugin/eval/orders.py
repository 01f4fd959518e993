"""The evaluation's random orders, each a pure function of (seed, chunk, draw).

A chunk keeps its orders whatever the batch size, `--max-chunks` or device, so numbers reproduce
and a shorter run scores a prefix of a longer run's (chunk, order) pairs. Context permutations of
the ensemble are drawn per target index with m ascending, so the first M' of an M-ensemble are the
M'-ensemble's: M = 1, 2, 4, ... come out of one run and agree with separate runs.
"""

from __future__ import annotations

import torch

from ..data.orders import generator_for

ORDER_KINDS = ("l2r", "random")
_BASE_TAG = 0xE7A1  # keeps these streams apart from training's and validation's
_CONTEXT_TAG = 0xC0E7


def base_order(kind: str, seq_len: int, seed: int, chunk: int, draw: int) -> torch.Tensor:
    """sigma for draw `draw` of chunk `chunk`: the identity (l2r) or a uniform permutation (random)."""
    if kind == "l2r":
        return torch.arange(seq_len)
    return torch.randperm(seq_len, generator=generator_for(_BASE_TAG, seed, chunk, draw))


def context_permutations(seed: int, chunk: int, draw: int, index: int, count: int) -> torch.Tensor:
    """(count, index) permutations of the `index` context slots of target sigma(index), for m = 1..count."""
    g = generator_for(_CONTEXT_TAG, seed, chunk, draw, index)
    if count == 0:
        return torch.empty(0, index, dtype=torch.long)
    return torch.stack([torch.randperm(index, generator=g) for _ in range(count)])
