"""adaLN modulation precomputed per target position: a table lookup replaces a Linear per block.

A slot's adaLN shift/scale/gate depend on nothing but its target position t: Linear(SiLU(E[t])).
So the sampler computes them once for every position (max_seq_len x 6d per block, 226 MB for the
small model in float32) and each step gathers one row per slot, instead of running 12 + 1 small
Linears per step, each of which has to read its whole weight for a few rows.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModulationTable(nn.Module):
    """forward(targets) = adaln(SiLU(target_embeddings[targets])); targets (..., 1) long."""

    def __init__(self, adaln: nn.Linear, target_embeddings: nn.Embedding):
        super().__init__()
        with torch.no_grad():
            self.table = adaln(F.silu(target_embeddings.weight)).detach()

    def forward(self, targets: torch.Tensor) -> torch.Tensor:
        return F.embedding(targets[..., 0], self.table)


def tabulate_modulation(model: nn.Module) -> bool:
    """Replace every adaLN Linear of an AO-GPT (view) by its table; False if it has no adaLN."""
    if getattr(model, "final_adaln", None) is None:
        return False
    positions = model.target_embeddings
    for block in model.layers.values():
        block.adaln = ModulationTable(block.adaln, positions)
    model.final_adaln = ModulationTable(model.final_adaln, positions)
    return True
