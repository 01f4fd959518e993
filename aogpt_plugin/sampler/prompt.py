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
reverse process), left to right, or given by the caller (`sample_orders`). Each sample of a batch
has its own given tokens, length and fill order.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from ..errors import UserError, flag_name, is_int
from ..orders import L2R, RANDOM, READ_ORDERS


@dataclass(frozen=True)
class Prompt:
    """Sorted, distinct positions and the token id at each: what one sample is given (a batch takes one for
    every sample, or one per sample: `sample_prompts`)."""

    positions: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.positions)

    def validate(self, length: int, vocab_size: int | None = None, of: str = "") -> Prompt:
        """The given tokens fit a sample of `length` positions: each position inside it and given once, each id
        in the vocabulary (unless `vocab_size` is None), and at least one position left to generate. `of` names
        the sample in a batch whose samples differ (" (sample 3)")."""
        if len(self.positions) != len(self.tokens):
            raise UserError(f"prompt has {len(self.positions)} positions but {len(self.tokens)} tokens")
        seen = set()
        for pos in self.positions:
            if not 0 <= pos < length:
                raise UserError(f"given position {pos} is outside the sampled length; allowed: 0..{length - 1}")
            if pos in seen:
                raise UserError(f"position {pos} is given twice; each position may be given once")
            seen.add(pos)
        for tok in self.tokens if vocab_size is not None else ():
            if not 0 <= tok < vocab_size:
                raise UserError(f"token id {tok} is outside the vocabulary; allowed: 0..{vocab_size - 1}")
        if len(self.tokens) >= length:
            raise UserError(f"all {length} positions are given{of}; nothing is left to generate")
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


def parse_infill(
    spec: str | dict | list, encode=None, builder: PromptBuilder | None = None, spell=flag_name
) -> PromptBuilder:
    """Add the spans of an infill JSON string, '@file.json', already-parsed dict, or list of spans to
    `builder`.

    `encode(text) -> list[int]` tokenizes text spans (needed only if there are any). `spell` names the
    option in messages as the caller wrote it (`--infill`, or the keyword `infill`).
    """
    builder = builder or PromptBuilder()
    name = spell("infill")
    if isinstance(spec, list):
        spec = {"spans": spec}
    if isinstance(spec, str):
        text = spec
        if spec.startswith("@"):
            try:
                with open(os.path.expanduser(spec[1:]), encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise UserError(f"{name} file {spec[1:]!r} cannot be read ({type(e).__name__})") from None
            except UnicodeDecodeError as e:
                raise UserError(f"{name} file {spec[1:]!r} is not UTF-8 text (byte {e.start})") from None
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{name} is not valid JSON ({e.msg} at char {e.pos}); see `aogpt sample --help`") from None
    spans = spec.get("spans") if isinstance(spec, dict) else None
    if not isinstance(spans, list) or set(spec) != {"spans"}:
        raise UserError(f'{name} must be a JSON object {{"spans": [{{"start": INT, "text": STR | "tokens": [INT]}}]}}')
    for i, span in enumerate(spans):
        if not isinstance(span, dict) or not is_int(span.get("start")):
            raise UserError(f"{name} span {i} needs an integer 'start'; got {span!r:.80}")
        keys = set(span) - {"start"}
        if keys == {"text"} and isinstance(span["text"], str):
            if encode is None:
                raise UserError(f"{name} span {i} has text but no tokenizer is available")
            tokens = list(encode(span["text"]))
        elif keys == {"tokens"} and isinstance(span["tokens"], list) and all(is_int(t) for t in span["tokens"]):
            tokens = span["tokens"]
        else:
            raise UserError(f"{name} span {i} needs exactly one of 'text' (string) or 'tokens' (list of ints)")
        if not tokens:
            raise UserError(f"{name} span {i} is empty")
        builder.add(span["start"], tokens)
    return builder


def is_span_list(value) -> bool:
    """Whether `value` is one infill given as its list of spans (each a dict with a 'start'), not a list of
    infills with one per sample."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and "start" in v for v in value)


# ---- per-sample given tokens and generation orders -------------------------------------------
def sample_prompts(prompt: Prompt | list[Prompt] | tuple[Prompt, ...] | None, batch: int) -> tuple[Prompt, ...]:
    """One Prompt per sample: `prompt` for every sample, or a sequence with one per sample."""
    if prompt is None or isinstance(prompt, Prompt):
        return (prompt or Prompt(),) * batch
    prompts = tuple(p or Prompt() for p in prompt)
    if len(prompts) != batch:
        raise UserError(f"prompt has {len(prompts)} items for {batch} samples; allowed: one, or one per sample")
    return prompts


def order_specs(order: str | torch.Tensor | list | tuple, batch: int) -> tuple:
    """One fill order per sample: a name (`random`, `l2r`) or a 1-D tensor of positions. `order` is a name
    or a tensor, (m,) for every sample or (batch, m), or a sequence with one per sample (each a name, a
    tensor or a list of positions)."""
    if isinstance(order, str):
        return (order,) * batch
    if isinstance(order, torch.Tensor):
        if order.dim() == 1:
            return (order,) * batch
        if order.dim() == 2 and order.shape[0] == batch:
            return tuple(order.unbind(0))
        raise UserError(f"order has shape {tuple(order.shape)}; allowed: (m,) or ({batch}, m), or one order per sample")
    specs = tuple(o if isinstance(o, (str, torch.Tensor)) else torch.as_tensor(o, dtype=torch.long) for o in order)
    if len(specs) != batch:
        raise UserError(f"order has {len(specs)} items for {batch} samples; allowed: one, or one per sample")
    return specs


def fill_order(free: torch.Tensor, order: str | torch.Tensor, generator: torch.Generator | None = None, sample=None):
    """(m,): the free positions of one sample in the order they are generated (a name, or the caller's
    permutation of them, checked). `sample`: its index, named in errors of a batch."""
    m = free.numel()
    of = "" if sample is None else f" (sample {sample})"
    if isinstance(order, torch.Tensor):
        given = order.long().cpu()
        if given.shape != (m,):
            raise UserError(f"order has shape {tuple(order.shape)}{of}; allowed: ({m},), one per position to generate")
        if not torch.equal(given.sort().values, free):
            raise UserError(f"order must list each position to generate exactly once (a permutation of them){of}")
        return given.clone()
    if order == L2R:
        return free.clone()
    if order == RANDOM:
        return free[torch.randperm(m, generator=generator)]
    raise UserError(f"order={order!r} is not supported; allowed: {', '.join(READ_ORDERS)} or a tensor of positions")


def sample_orders(
    length: int,
    lengths: tuple[int, ...],
    prompts: tuple[Prompt, ...],
    orders: tuple,
    generators: list[torch.Generator] | None = None,
) -> torch.Tensor:
    """(B, length) permutations of 0..length-1, one per sample: its given positions first (ascending), then
    its free positions below lengths[b] in its fill order (orders[b], random ones drawn with generators[b]),
    then the positions past its length, which it never reaches."""
    rows = []
    for b, (n_b, prompt, spec) in enumerate(zip(lengths, prompts, orders, strict=True)):
        free = prompt.free_positions(n_b)
        filled = fill_order(free, spec, None if generators is None else generators[b], b if len(lengths) > 1 else None)
        rows.append(torch.cat([torch.tensor(prompt.positions, dtype=torch.long), filled, torch.arange(n_b, length)]))
    return torch.stack(rows)
