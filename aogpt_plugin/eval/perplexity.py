"""Zero-shot perplexity of packed chunks: left to right, any order (K orders per chunk), and the
context-order ensemble on top of either. Every token of every chunk is scored, the first from the
[None] slot, so a chunk of n tokens contributes n NLL terms.

Each chunk's orders are a pure function of (seed, chunk, draw) (seeding.py, stream "eval_order"):
a chunk keeps its orders whatever the batch size, `--max-chunks` or device, so numbers reproduce
and a shorter run scores a prefix of a longer run's (chunk, order) pairs.

The estimate and its standard errors, from L[c, k], the mean NLL per token of chunk c under its
k-th random order (all chunks have n tokens, so the mean over (c, k) is the mean over all tokens):

    nll = mean_{c,k} L[c, k],   ppl = exp(nll).

  se_orders  how much nll would move with other random orders, text fixed (the Monte-Carlo error):
             orders are independent across chunks, so Var(nll) = sum_c Var_k(L[c, .]) / (K C^2),
             estimated as sqrt(sum_c s_c^2 / K) / C with s_c^2 the unbiased variance of chunk c's K
             values. Needs K >= 2; 0 for a deterministic order (left to right without ensemble).
  se_chunks  how much nll would move with other text of the same kind: the standard error of the
             chunk means, std_c(mean_k L[c, k]) / sqrt(C) (needs C >= 2; adjacent chunks of a
             document are correlated, so read it as a rough guide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from ..likelihood import perplexity, token_nlls
from ..orders import L2R
from ..seeding import stream_generator
from .ensemble import SlotCost, ensemble_nll, ensemble_sizes, member_nlls


def base_order(kind: str, seq_len: int, seed: int, chunk: int, draw: int) -> torch.Tensor:
    """sigma for draw `draw` of chunk `chunk`: the identity (l2r) or a uniform permutation (random)."""
    if kind == L2R:
        return torch.arange(seq_len)
    return torch.randperm(seq_len, generator=stream_generator("eval_order", seed, chunk, draw))


@dataclass
class Estimate:
    nll: float  # nats per token
    ppl: float
    se_orders: float | None
    se_chunks: float | None

    def as_dict(self) -> dict:
        return {"nll": self.nll, "ppl": self.ppl, "nll_se_orders": self.se_orders, "nll_se_chunks": self.se_chunks}


def estimate(per_draw_nll: torch.Tensor, deterministic: bool = False) -> Estimate:
    """per_draw_nll: (C, K) mean NLL per token for each (chunk, order draw)."""
    values = per_draw_nll.double()
    chunks, draws = values.shape
    nll = values.mean().item()
    if deterministic:
        se_orders = 0.0
    elif draws >= 2:
        se_orders = math.sqrt(values.var(dim=1, unbiased=True).sum().item() / draws) / chunks
    else:
        se_orders = None
    se_chunks = values.mean(dim=1).std(unbiased=True).item() / math.sqrt(chunks) if chunks >= 2 else None
    return Estimate(nll=nll, ppl=perplexity(nll), se_orders=se_orders, se_chunks=se_chunks)


@dataclass
class ChunkScores:
    per_draw_nll: torch.Tensor  # (chunks, draws, sizes): mean NLL per token of each (chunk, order), per M
    sizes: list[int]  # ensemble sizes M of the last axis
    order_kind: str
    cost: SlotCost = field(default_factory=SlotCost)

    def estimates(self) -> dict[int, Estimate]:
        return {
            size: estimate(self.per_draw_nll[:, :, s], deterministic=self.order_kind == "l2r" and size == 1)
            for s, size in enumerate(self.sizes)
        }


@torch.inference_mode()
def score_chunks(
    model,
    chunks: torch.Tensor,
    order_kind: str,
    draws: int = 1,
    members: int = 1,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = False,
) -> ChunkScores:
    """chunks: (C, n) token ids; row c is chunk number c of the dataset (its orders depend on c)."""
    device = next(model.parameters()).device
    num_chunks, n = chunks.shape
    sizes = ensemble_sizes(members)
    scores = ChunkScores(torch.zeros(num_chunks, draws, len(sizes), dtype=torch.float64), sizes, order_kind)
    pairs = [(c, k) for c in range(num_chunks) for k in range(draws)]
    with tqdm(total=len(pairs), desc="scoring", unit="seq", disable=not progress) as bar:
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            tokens = chunks[[c for c, _ in batch]].to(device)
            orders = torch.stack([base_order(order_kind, n, seed, c, k) for c, k in batch]).to(device)
            base = token_nlls(model, tokens, None if order_kind == "l2r" else orders)
            for row, (c, k) in enumerate(batch):
                nll = member_nlls(
                    model, tokens[row], orders[row], base[row], members, (seed, c, k), batch_size * n, scores.cost
                )
                for s, size in enumerate(sizes):
                    scores.per_draw_nll[c, k, s] = ensemble_nll(nll, size).mean()
                bar.update(1)
    return scores


@dataclass
class PerplexityReport:
    """What `aogpt eval ppl` reports for scored chunks: per ensemble size M, the estimate and the bits
    per byte of the scored text; `nll`, `ppl` and the standard errors are those of the largest M."""

    scores: ChunkScores
    estimates: dict[int, Estimate]
    bits_per_byte: dict[int, float]  # the same NLL spread over the UTF-8 bytes the scored tokens spell
    text_bytes: int

    @property
    def final(self) -> Estimate:
        return self.estimates[self.scores.sizes[-1]]

    @property
    def nll(self) -> float:
        """Nats per token."""
        return self.final.nll

    @property
    def ppl(self) -> float:
        return self.final.ppl

    @property
    def per_chunk_nll(self) -> torch.Tensor:
        """(chunks, orders) mean NLL per token of each (chunk, order) at the largest M."""
        return self.scores.per_draw_nll[:, :, -1]


def perplexity_report(scores: ChunkScores, chunks: torch.Tensor, byte_lengths: torch.Tensor) -> PerplexityReport:
    """What `aogpt eval ppl` reports of `chunks` (C, n) scored by `score_chunks`; `byte_lengths` (the
    tokenizer's, per id) gives bits per byte."""
    estimates = scores.estimates()
    bits = {size: bits_per_byte(e.nll, chunks, byte_lengths) for size, e in estimates.items()}
    return PerplexityReport(scores, estimates, bits, int(byte_lengths[chunks].sum()))


def bits_per_byte(nll: float, scored: torch.Tensor, byte_lengths: torch.Tensor) -> float:
    """A mean NLL per token of the ids `scored` spread over the UTF-8 bytes they spell, in bits: models
    with different tokenizers compare (EOS adds NLL but no bytes). NaN when they spell no byte."""
    text_bytes = int(byte_lengths[scored].sum())
    return nll * scored.numel() / (math.log(2) * text_bytes) if text_bytes else math.nan
