"""The AO training loss in torchtitan's contract, and the guard that keeps a bad step out of the weights.

Training: labels are x[sigma] (the dataloader gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.

StepGuard: one per TrainSpec, handed to both builders (train_spec.py), so they share it explicitly
and nothing else can. The loss records every microbatch's loss sum; before each optimizer step the
optimizers container asks the guard whether the loss or the gradients were NaN/inf on any rank
(one all-reduce), and after it whether the new weights are finite. A bad step raises
NonFiniteStepError before anything is written: no weight, EMA or checkpoint after the last good step.
"""

from __future__ import annotations

from itertools import chain

import torch
import torch.distributed as dist

from .ema import clean_fqn, local_tensor
from .errors import UserError
from .likelihood import ao_cross_entropy


class NonFiniteStepError(RuntimeError):
    """Training stopped at `step` because `what` was NaN/inf; the message is one line for the user."""

    def __init__(self, step: int, what: str):
        self.step, self.what = step, what
        super().__init__(
            f"step {step}: {what}; stopped before the optimizer step, so no weight, EMA or checkpoint was written "
            f"after step {step - 1}"
        )


def nonfinite_count(tensors: list[torch.Tensor]) -> torch.Tensor:
    """How many of `tensors` (local shards) hold a NaN/inf, as a device scalar (no host sync)."""
    if not tensors:
        return torch.zeros(())
    norms = torch._foreach_norm([local_tensor(t).float() for t in tensors])  # inf/NaN survive a norm
    return (~torch.isfinite(torch.stack(norms))).sum().float()


def _any_rank(flags: torch.Tensor) -> list[float]:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags.tolist()


class StepGuard:
    def __init__(self) -> None:
        self.enabled = True
        self.total: torch.Tensor | None = None

    def record(self, loss_sum: torch.Tensor) -> None:
        v = loss_sum.detach().float()
        self.total = v if self.total is None else self.total + v

    def check_before_step(self, params: list[torch.Tensor], step: int) -> None:
        """Raise if this step's loss or any gradient is NaN/inf on any rank."""
        loss = self.total
        self.total = None
        if not self.enabled:
            return
        device = params[0].device if params else "cpu"
        bad_loss = (~torch.isfinite(loss)).float() if loss is not None else torch.zeros((), device=device)
        bad_grads = nonfinite_count([p.grad for p in params if p.grad is not None])
        flags = torch.stack([bad_loss.to(device).reshape(()), bad_grads.to(device)])
        lost, grads = _any_rank(flags)
        if lost:
            raise NonFiniteStepError(step, "the training loss is NaN/inf")
        if grads:
            raise NonFiniteStepError(step, "the gradient norm is NaN/inf (the loss was finite)")

    def check_after_step(self, params: list[torch.Tensor], step: int) -> None:
        """Raise if the update itself made a weight NaN/inf (say an absurd learning rate)."""
        if self.enabled and _any_rank(nonfinite_count(params).reshape(1))[0]:
            raise NonFiniteStepError(step, "the optimizer step made weights NaN/inf (the gradients were finite)")


def refuse_nonfinite_load(module: torch.nn.Module, incompatible_keys=None) -> None:
    """A load_state_dict post-hook (infra/parallelize.py registers it): a checkpoint whose weights or
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
