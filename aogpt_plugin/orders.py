"""Orders sigma: the permutation a sequence is read in, one vocabulary for training, evaluation and sampling.

    random        a uniformly random permutation (the MDM / any-order objective); old spelling `uniform`
    l2r           left to right (the identity)
    mixture       training only: l2r with probability p_l2r, else random (the paper's 10% left to right)
    fixed_random  training only: one fixed random permutation for every sequence
    blockwise:K   training only: blocks of K left to right, one fixed permutation inside every block

Training draws sigma for sequence `index` of data-parallel rank `stream` as a pure function of
(seed, stream, index) (seeding.py), so a resumed run draws exactly the orders an uninterrupted run
would, given the index it saved, and ranks never share a stream.

An `L2RCurriculum` makes mixture's share of left-to-right sequences a function of the training step:
1.0 at step 1, falling (linearly or along a half cosine) to p_l2r at step `steps` + 1, then p_l2r.
A run that starts from a left-to-right model (GPT-2) first reads the order it knows and moves to
any order gradually. The step of sequence `index` is index // (its stream's sequences per step) + 1,
so the share, like the order, is a pure function of the index: exact across resume.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
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


CURRICULUM_SHAPES = ("linear", "cosine")


@dataclass(frozen=True)
class L2RCurriculum:
    """Mixture's share of left-to-right sequences falls from 1.0 to p_l2r over the first `steps` steps."""

    steps: int  # 0: no curriculum, p_l2r from the first step
    shape: str = "linear"  # linear | cosine (half a cosine: slow at both ends)
    sequences_per_step: int = 1  # sequences one stream draws per optimizer step (micro-batches included)

    def __post_init__(self) -> None:
        check_curriculum(self.steps, self.shape)
        if self.sequences_per_step < 1:
            raise ConfigError(f"sequences_per_step={self.sequences_per_step} must be >= 1")

    def share(self, step: int, p_l2r: float) -> float:
        """The share of left-to-right sequences at training step `step` (1-based)."""
        if step > self.steps:  # over (or off): exactly p_l2r, so the orders are those of no curriculum
            return p_l2r
        done = (step - 1) / self.steps
        fall = done if self.shape == "linear" else (1.0 - math.cos(math.pi * done)) / 2
        return 1.0 - (1.0 - p_l2r) * fall

    def step_of(self, index: int) -> int:
        """The training step that draws a stream's sequence `index` (0-based)."""
        return index // self.sequences_per_step + 1


def check_curriculum(steps: int, shape: str, order: str = "mixture", key: str = "aogpt") -> None:
    """The curriculum's steps and shape, and the order it applies to (config and sampler both ask)."""
    if steps < 0:
        raise ConfigError(f"{key}.l2r_curriculum_steps={steps} is not allowed; allowed: 0 (off) or >= 1")
    if shape not in CURRICULUM_SHAPES:
        raise ConfigError(f"{key}.l2r_curriculum={shape!r} is not supported; allowed: {', '.join(CURRICULUM_SHAPES)}")
    if steps and order != "mixture":
        raise ConfigError(
            f"{key}.l2r_curriculum_steps={steps} moves the share of left-to-right orders, which only "
            f"{key}.order='mixture' has (got {order!r}); allowed: order='mixture' (p_l2r=0 ends at random orders only)"
        )


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

    def __init__(
        self, spec: str, seq_len: int, p_l2r: float = 0.1, seed: int = 0, curriculum: L2RCurriculum | None = None
    ):
        import torch

        self.kind, self.block = parse_order_kind(spec)
        check_p_l2r(p_l2r)
        self.curriculum = curriculum or L2RCurriculum(0)
        check_curriculum(self.curriculum.steps, self.curriculum.shape, self.kind)
        self.spec, self.seq_len, self.p_l2r, self.seed = spec, seq_len, p_l2r, seed
        self._fixed = None
        if self.kind == "fixed_random":
            self._fixed = torch.randperm(seq_len, generator=stream_generator("train_fixed_order", seed))
        elif self.kind == "blockwise":
            self._fixed = blockwise_order(seq_len, self.block, stream_generator("train_blockwise_order", seed))

    def l2r_share(self, index: int) -> float:
        """Mixture's probability that sequence `index` is read left to right (the curriculum's, at its step)."""
        return self.curriculum.share(self.curriculum.step_of(index), self.p_l2r)

    def sample(self, stream: int, index: int) -> torch.Tensor:
        import torch

        n = self.seq_len
        if self._fixed is not None:
            return self._fixed.clone()
        if self.kind == L2R:
            return torch.arange(n)
        g = stream_generator("train_order", self.seed, stream, index)
        if self.kind == "mixture" and torch.rand((), generator=g).item() < self.l2r_share(index):
            return torch.arange(n)
        return torch.randperm(n, generator=g)
