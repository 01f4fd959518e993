"""Every random stream of the project, in one table: each draw is a pure function of integers.

Why: a resumed run must draw the orders an uninterrupted run would, a shorter evaluation must score
a prefix of a longer one's (chunk, order) pairs, and a batch size or device must never change a
sample. So no stream reads global RNG state: each seeds its own torch.Generator from a 63-bit mix
of its parts (splitmix64; Python's hash() is salted per process). Streams are kept apart by a tag
mixed in with the parts; the table records where each tag goes, so existing seeds keep their draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers."""
    h = 0
    for p in parts:
        h = _splitmix64(h ^ (int(p) & _MASK64))
    return h >> 1


@dataclass(frozen=True)
class Stream:
    parts: str  # what the caller passes, in order
    tag: int | None = None  # None: the parts alone (the training streams predate tags)
    tag_first: bool = True  # the tag goes before the parts, else after them


STREAMS: dict[str, Stream] = {
    # training (dataloader.py, validate.py)
    "train_order": Stream("order_seed, data-parallel rank, sequence index"),
    "train_fixed_order": Stream("order_seed", tag=0xF1CED, tag_first=False),
    "train_blockwise_order": Stream("order_seed", tag=0xB10C, tag_first=False),
    "train_shuffle": Stream("order_seed, data-parallel rank, window index", tag=0x5F1E, tag_first=True),
    "validation_order": Stream("val_order_seed, data-parallel rank, window, order k"),
    "synthetic_train": Stream("source seed, data-parallel rank, chunk", tag=0x5EED7, tag_first=True),
    "synthetic_validation": Stream("source seed, data-parallel rank", tag=0x5EED7A1, tag_first=True),
    "synthetic_eval": Stream("source seed, evaluation seed", tag=0x5EED7E, tag_first=True),
    # evaluation (eval/perplexity, eval/ensemble)
    "eval_order": Stream("seed, chunk, draw", tag=0xE7A1),
    "eval_context_order": Stream("seed, chunk, draw, target index", tag=0xC0E7),
    # sampling (sampler/generation.py), per sample: sample i of a batch seeded s has the seed sample_seed(s, i)
    # (or its own); sample 0's is s itself, so a batch's first sample is the batch of one with its seed
    "sample_index": Stream("a batch's seed, the sample's index i >= 1", tag=0x5A1D, tag_first=True),
    "sample_plan": Stream("a sample's seed (its order, its binomial counts)", tag=0x0BDE, tag_first=False),
    "sample_noise": Stream(
        "a sample's seed (the key of its counter-based Gumbel noise, sampler/noise.py)", tag=0x6E75, tag_first=False
    ),  # fmt: skip
    # `aogpt convert --from-hf` (model/gpt2.py): adaLN's target-position table, which GPT-2 has not
    "gpt2_target_table": Stream("seed", tag=0x6972, tag_first=False),
}


MAX_SEED = (1 << 64) - 1  # seeds are 64-bit: a wider one would be reduced, and two seeds would draw alike


def sample_seed(seed: int, index: int) -> int:
    """The seed of sample `index` of a batch seeded `seed`: `seed` itself for sample 0, else a mix of both
    (not seed + index, which would give the batches seeded s and s + 1 all but one sample in common)."""
    return seed if index == 0 else stream_seed("sample_index", seed, index)


def stream_seed(name: str, *parts: int) -> int:
    stream = STREAMS[name]
    if stream.tag is None:
        return mix_seed(*parts)
    return mix_seed(stream.tag, *parts) if stream.tag_first else mix_seed(*parts, stream.tag)


def stream_generator(name: str, *parts: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator for stream `name` (a key of STREAMS) seeded from `parts`."""
    import torch  # here, not at the top: `aogpt --help` and the CLI's argument parsing load no torch

    return torch.Generator(device=device).manual_seed(stream_seed(name, *parts))
