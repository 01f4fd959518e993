"""Perplexity and its standard errors from per-(chunk, order) mean NLLs.

L[c, k] is the mean NLL per token of chunk c under its k-th random order (all chunks have n
tokens, so the mean over (c, k) is the mean over all scored tokens). The estimate is

    nll = mean_{c,k} L[c, k],   ppl = exp(nll).

Two standard errors answer two questions:
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
from dataclasses import dataclass

import torch


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
    return Estimate(nll=nll, ppl=math.exp(nll), se_orders=se_orders, se_chunks=se_chunks)
