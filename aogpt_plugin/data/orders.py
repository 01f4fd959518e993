"""Order distributions: which permutation sigma each training sequence is read in.

Every draw is a pure function of (seed, stream, index) through a torch.Generator seeded with a
mixed 63-bit key, so a resumed run draws exactly the orders an uninterrupted run would, given the
index it saved, and ranks never share a stream.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError

ORDER_KINDS = ("mixture", "uniform", "l2r", "fixed_random", "blockwise:K")
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (Python's hash() is not used: it is salted)."""
    h = 0
    for p in parts:
        h = _splitmix64(h ^ (int(p) & _MASK64))
    return h >> 1


def generator_for(*parts: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(mix_seed(*parts))
    return g


def parse_order_kind(spec: str) -> tuple[str, int]:
    """'blockwise:4' -> ('blockwise', 4); other kinds -> (kind, 0). Raises ConfigError."""
    kind, _, arg = spec.partition(":")
    if kind == "blockwise":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"aogpt.order={spec!r}: blockwise needs a positive block size, e.g. 'blockwise:4'")
        return kind, int(arg)
    if kind not in ORDER_KINDS or arg:
        raise ConfigError(f"aogpt.order={spec!r} is not supported; allowed: {', '.join(ORDER_KINDS)}")
    return kind, 0


def blockwise_order(n: int, block: int, g: torch.Generator) -> torch.Tensor:
    """One fixed permutation of `block` slots applied inside every block, blocks left to right.
    A short last block keeps the relative order of the permutation's entries that fit."""
    pi = torch.randperm(block, generator=g)
    parts = []
    for start in range(0, n, block):
        width = min(block, n - start)
        parts.append(start + pi[pi < width])
    return torch.cat(parts)


class OrderSampler:
    """Draws sigma for sequence number `index` of stream `stream` (the data-parallel rank)."""

    def __init__(self, spec: str, seq_len: int, p_l2r: float = 0.1, seed: int = 0):
        self.kind, self.block = parse_order_kind(spec)
        if not 0.0 <= p_l2r <= 1.0:
            raise ConfigError(f"aogpt.p_l2r={p_l2r} is outside the allowed range [0, 1]")
        self.spec, self.seq_len, self.p_l2r, self.seed = spec, seq_len, p_l2r, seed
        self._fixed = None
        if self.kind == "fixed_random":
            self._fixed = torch.randperm(seq_len, generator=generator_for(seed, 0xF1CED))
        elif self.kind == "blockwise":
            self._fixed = blockwise_order(seq_len, self.block, generator_for(seed, 0xB10C))

    def sample(self, stream: int, index: int) -> torch.Tensor:
        n = self.seq_len
        if self._fixed is not None:
            return self._fixed.clone()
        if self.kind == "l2r":
            return torch.arange(n)
        g = generator_for(self.seed, stream, index)
        if self.kind == "mixture" and torch.rand((), generator=g).item() < self.p_l2r:
            return torch.arange(n)
        return torch.randperm(n, generator=g)
