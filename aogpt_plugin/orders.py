"""Orders sigma: the permutation a sequence is read in, one vocabulary for training, evaluation and sampling.

    random        a uniformly random permutation (the MDM / any-order objective); old spelling `uniform`
    l2r           left to right (the identity)
    mixture       training only: l2r with probability p_l2r, else random (the paper's 10% left to right)
    fixed_random  training only: one fixed random permutation for every sequence
    blockwise:K   training only: blocks of K left to right, one fixed permutation inside every block

Training draws sigma for sequence `index` of data-parallel rank `stream` as a pure function of
(seed, stream, index) (seeding.py), so a resumed run draws exactly the orders an uninterrupted run
would, given the index it saved, and ranks never share a stream.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from .errors import ConfigError
from .seeding import stream_generator

if TYPE_CHECKING:
    import torch

RANDOM, L2R = "random", "l2r"
READ_ORDERS = (RANDOM, L2R)  # what `aogpt eval ppl --order` and `aogpt sample --order` accept
ORDER_KINDS = ("mixture", RANDOM, L2R, "fixed_random", "blockwise:K")
ALIASES = {"uniform": RANDOM}


def parse_order_kind(spec: str, key: str = "aogpt.order") -> tuple[str, int]:
    """'blockwise:4' -> ('blockwise', 4); other kinds -> (kind, 0), aliases spelled canonically."""
    kind, _, arg = spec.partition(":")
    if kind in ALIASES and not arg:
        warnings.warn(
            f"{key}={spec!r} is now spelled {ALIASES[kind]!r} (the same uniformly random permutation)",
            FutureWarning,
            stacklevel=2,
        )
        return ALIASES[kind], 0
    if kind == "blockwise":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"{key}={spec!r}: blockwise needs a positive block size, e.g. 'blockwise:4'")
        return kind, int(arg)
    if kind not in ORDER_KINDS or arg:
        raise ConfigError(f"{key}={spec!r} is not supported; allowed: {', '.join(ORDER_KINDS)}")
    return kind, 0


def canonical_order(spec: str, key: str = "aogpt.order") -> str:
    """The one spelling of an order spec ('uniform' -> 'random'), checked: what a config stores."""
    kind, block = parse_order_kind(spec, key)
    return f"blockwise:{block}" if kind == "blockwise" else kind


def check_p_l2r(p_l2r: float, key: str = "aogpt.p_l2r") -> None:
    """The share of left-to-right sequences under `mixture` is a probability (config and sampler both ask)."""
    if not 0.0 <= p_l2r <= 1.0:
        raise ConfigError(f"{key}={p_l2r} is outside the allowed range [0, 1]")


def blockwise_order(n: int, block: int, g: torch.Generator) -> torch.Tensor:
    """One fixed permutation of `block` slots applied inside every block, blocks left to right.
    A short last block keeps the relative order of the permutation's entries that fit."""
    import torch

    pi = torch.randperm(block, generator=g)
    parts = []
    for start in range(0, n, block):
        width = min(block, n - start)
        parts.append(start + pi[pi < width])
    return torch.cat(parts)


class OrderSampler:
    """Draws sigma for sequence number `index` of stream `stream` (the data-parallel rank)."""

    def __init__(self, spec: str, seq_len: int, p_l2r: float = 0.1, seed: int = 0):
        import torch

        self.kind, self.block = parse_order_kind(spec)
        check_p_l2r(p_l2r)
        self.spec, self.seq_len, self.p_l2r, self.seed = spec, seq_len, p_l2r, seed
        self._fixed = None
        if self.kind == "fixed_random":
            self._fixed = torch.randperm(seq_len, generator=stream_generator("train_fixed_order", seed))
        elif self.kind == "blockwise":
            self._fixed = blockwise_order(seq_len, self.block, stream_generator("train_blockwise_order", seed))

    def sample(self, stream: int, index: int) -> torch.Tensor:
        import torch

        n = self.seq_len
        if self._fixed is not None:
            return self._fixed.clone()
        if self.kind == L2R:
            return torch.arange(n)
        g = stream_generator("train_order", self.seed, stream, index)
        if self.kind == "mixture" and torch.rand((), generator=g).item() < self.p_l2r:
            return torch.arange(n)
        return torch.randperm(n, generator=g)
