"""NaN/inf in tensors: how many hold one (the step guard's checks, one norm per tensor) and the refusal of
a checkpoint whose weights or EMA hold one."""

from __future__ import annotations

from itertools import chain

import torch
import torch.distributed as dist

from ..errors import UserError
from .ema import clean_fqn, local_tensor


def nonfinite_count(tensors: list[torch.Tensor]) -> torch.Tensor:
    """How many of `tensors` (local shards) hold a NaN/inf, as a device scalar (no host sync)."""
    if not tensors:
        return torch.zeros(())
    norms = torch._foreach_norm([local_tensor(t).float() for t in tensors])  # inf/NaN survive a norm
    return (~torch.isfinite(torch.stack(norms))).sum().float()


def refuse_nonfinite_load(module: torch.nn.Module, incompatible_keys=None) -> None:
    """A load_state_dict post-hook (parallelize.py registers it): a checkpoint whose weights or
    EMA hold NaN/inf is refused by the name of the first such tensor, on every rank alike."""
    tensors = chain(module.named_parameters(), module.named_buffers())
    bad = next((n for n, t in tensors if t.is_floating_point() and nonfinite_count([t]).item()), None)
    names = [bad]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        names = [None] * dist.get_world_size()
        dist.all_gather_object(names, bad)
    first = next((n for n in names if n), None)
    if first is not None:
        raise UserError(f"the checkpoint being loaded holds NaN/inf values in tensor {clean_fqn(first)!r}; refusing it")
