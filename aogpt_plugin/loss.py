"""The AO training loss in torchtitan's contract, and the guard that keeps a bad step from the weights.

Training: labels are x[sigma] (the dataloader gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.

StepGuard: the loss records every microbatch's loss sum; the optimizers container asks the guard,
before it steps, whether any of them was NaN/inf on any rank. One guard is made per TrainSpec and
handed to both builders (train_spec.py), so they share it explicitly and nothing else can.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .likelihood import ao_cross_entropy


class NonFiniteLossError(RuntimeError):
    pass


class StepGuard:
    """Accumulates the loss sums torchtitan computes between two optimizer steps (no host sync)."""

    def __init__(self) -> None:
        self.enabled = True
        self.total: torch.Tensor | None = None

    def record(self, loss_sum: torch.Tensor) -> None:
        v = loss_sum.detach().float()
        self.total = v if self.total is None else self.total + v

    def pop_nonfinite(self) -> bool:
        """True if any rank saw a non-finite loss since the last call (one tiny all-reduce)."""
        if self.total is None:
            return False
        bad = (~torch.isfinite(self.total)).float().reshape(1)
        self.total = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        return bool(bad.item())


def build_ao_loss(job_config, guard: StepGuard, **kwargs):
    """torchtitan `build_loss_fn`: the summed AO cross-entropy, optionally compiled, recorded by `guard`."""
    loss_fn = ao_cross_entropy
    if job_config.compile.enable and "loss" in job_config.compile.components:
        loss_fn = torch.compile(loss_fn, backend=job_config.compile.backend)
    guard.enabled = job_config.aogpt.nan_check
    guard.total = None

    def watched(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(pred, labels)
        guard.record(loss)
        return loss

    return watched
