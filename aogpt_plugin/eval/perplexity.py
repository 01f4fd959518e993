"""Zero-shot perplexity of packed chunks: left to right, any order (K orders per chunk), and the
context-order ensemble on top of either. Every token of every chunk is scored, the first from the
[None] slot, so a chunk of n tokens contributes n NLL terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from .ensemble import SlotCost, ensemble_nll, ensemble_sizes, member_nlls
from .likelihood import token_nlls
from .orders import base_order
from .stats import Estimate, estimate


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
