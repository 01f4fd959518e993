"""Given tokens at given positions: prefixes, suffixes and scattered spans to condition on.

The infill JSON (`aogpt sample --infill`, or `parse_infill` here) is one object with a list of spans;
each span starts at a 0-based token position and holds either text (GPT-2 BPE, no EOS added) or
token ids:

    {"spans": [{"start": 0, "text": "The weather today"},
               {"start": 40, "tokens": [464, 3290, 318]},
               {"start": 120, "text": " The end."}]}

Spans may not overlap and must lie inside the sampled length n. `--prompt TEXT` is the span
{"start": 0, "text": TEXT}. The given tokens are read first (in ascending position) and never
change; every other position is generated, in the fill order: uniformly random per sample (the MDM
reverse process), left to right, or given by the caller (`generation_orders`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from ..errors import UserError
from ..orders import L2R, RANDOM, READ_ORDERS


@dataclass(frozen=True)
class Prompt:
    """Sorted, distinct positions and the token id at each; the same for every sample of a batch."""

    positions: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.positions)

    def validate(self, length: int, vocab_size: int) -> Prompt:
        if len(self.positions) != len(self.tokens):
            raise UserError(f"prompt has {len(self.positions)} positions but {len(self.tokens)} tokens")
        seen = set()
        for pos in self.positions:
            if not 0 <= pos < length:
                raise UserError(f"given position {pos} is outside the sampled length; allowed: 0..{length - 1}")
            if pos in seen:
                raise UserError(f"position {pos} is given twice; each position may be given once")
            seen.add(pos)
        for tok in self.tokens:
            if not 0 <= tok < vocab_size:
                raise UserError(f"token id {tok} is outside the vocabulary; allowed: 0..{vocab_size - 1}")
        return self

    def free_positions(self, length: int) -> torch.Tensor:
        """Positions left to generate, ascending."""
        given = torch.zeros(length, dtype=torch.bool)
        if self.positions:
            given[list(self.positions)] = True
        return (~given).nonzero().squeeze(1)


@dataclass
class PromptBuilder:
    """Collects spans (checking overlaps as they come) and returns a sorted `Prompt`."""

    tokens_at: dict[int, int] = field(default_factory=dict)

    def add(self, start: int, tokens: list[int]) -> PromptBuilder:
        if start < 0:
            raise UserError(f"span start {start} is negative; positions start at 0")
        for offset, tok in enumerate(tokens):
            pos = start + offset
            if pos in self.tokens_at:
                raise UserError(f"position {pos} is given twice (overlapping spans); each position may be given once")
            self.tokens_at[pos] = int(tok)
        return self

    def build(self) -> Prompt:
        positions = tuple(sorted(self.tokens_at))
        return Prompt(positions, tuple(self.tokens_at[p] for p in positions))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_infill(spec: str | dict, encode=None, builder: PromptBuilder | None = None) -> PromptBuilder:
    """Add the spans of an infill JSON string, '@file.json', or already-parsed dict to `builder`.

    `encode(text) -> list[int]` tokenizes text spans (needed only if there are any).
    """
    builder = builder or PromptBuilder()
    if isinstance(spec, str):
        text = spec
        if spec.startswith("@"):
            try:
                with open(os.path.expanduser(spec[1:]), encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise UserError(f"--infill file {spec[1:]!r} cannot be read ({type(e).__name__})") from None
            except UnicodeDecodeError as e:
                raise UserError(f"--infill file {spec[1:]!r} is not UTF-8 text (byte {e.start})") from None
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(
                f"--infill is not valid JSON ({e.msg} at char {e.pos}); see `aogpt sample --help`"
            ) from None
    spans = spec.get("spans") if isinstance(spec, dict) else None
    if not isinstance(spans, list) or set(spec) != {"spans"}:
        raise UserError('--infill must be a JSON object {"spans": [{"start": INT, "text": STR | "tokens": [INT]}]}')
    for i, span in enumerate(spans):
        if not isinstance(span, dict) or not _is_int(span.get("start")):
            raise UserError(f"--infill span {i} needs an integer 'start'; got {span!r:.80}")
        keys = set(span) - {"start"}
        if keys == {"text"} and isinstance(span["text"], str):
            if encode is None:
                raise UserError(f"--infill span {i} has text but no tokenizer is available")
            tokens = list(encode(span["text"]))
        elif keys == {"tokens"} and isinstance(span["tokens"], list) and all(_is_int(t) for t in span["tokens"]):
            tokens = span["tokens"]
        else:
            raise UserError(f"--infill span {i} needs exactly one of 'text' (string) or 'tokens' (list of ints)")
        if not tokens:
            raise UserError(f"--infill span {i} is empty")
        builder.add(span["start"], tokens)
    return builder


# ---- generation orders -----------------------------------------------------------------------
def fill_orders(
    free: torch.Tensor, batch: int, order: str | torch.Tensor = "random", generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, len(free)): the free positions in the order they are generated."""
    m = free.numel()
    if isinstance(order, torch.Tensor):
        given = order.long().cpu()
        if given.dim() == 1:
            given = given.expand(batch, -1)
        if given.shape != (batch, m):
            raise UserError(f"order has shape {tuple(order.shape)}; allowed: ({m},) or ({batch}, {m})")
        if not torch.equal(given.sort(dim=1).values, free.expand(batch, m)):
            raise UserError("order must list each position to generate exactly once (a permutation of them)")
        return given.clone()
    if order == L2R:
        return free.expand(batch, m).clone()
    if order == RANDOM:
        return torch.stack([free[torch.randperm(m, generator=generator)] for _ in range(batch)])
    raise UserError(f"order={order!r} is not supported; allowed: {', '.join(READ_ORDERS)} or a tensor of positions")


def generation_orders(
    length: int,
    batch: int,
    prompt: Prompt | None = None,
    order: str | torch.Tensor = "random",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(batch, length) permutations: prompt positions first, then the fill order."""
    prompt = prompt or Prompt()
    given = torch.tensor(prompt.positions, dtype=torch.long).expand(batch, len(prompt))
    filled = fill_orders(prompt.free_positions(length), batch, order, generator)
    return torch.cat([given, filled], dim=1)
