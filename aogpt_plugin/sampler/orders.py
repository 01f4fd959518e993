"""Generation orders sigma: which position each slot of the decoder reads and predicts.

The given (prompt) positions come first, ascending -- they are read, never predicted -- then the
positions to fill in the chosen order: uniformly random per sample (the MDM reverse process),
left to right, or given by the caller.
"""

from __future__ import annotations

import torch

from ..errors import UserError
from .prompt import Prompt

ORDERS = ("random", "l2r")


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
    if order == "l2r":
        return free.expand(batch, m).clone()
    if order == "random":
        return torch.stack([free[torch.randperm(m, generator=generator)] for _ in range(batch)])
    raise UserError(f"order={order!r} is not supported; allowed: {', '.join(ORDERS)} or a tensor of positions")


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
