"""The step guard: it keeps a bad step out of the weights, the EMA and the checkpoints.

One per TrainSpec, handed to both builders (titan022/spec.py), so they share it explicitly and
nothing else can. The loss (loss.py) records every microbatch's loss sum and token count; an
optimizer step pre-hook (optimizers.py) asks the guard, in one all-reduce over the ranks, whether the
loss or the gradients were NaN/inf anywhere, whether a stop was requested anywhere (SIGTERM/Ctrl-C,
stop_request.py), and the step's mean loss, kept per step with whether it was in the normal range
(the checkpoint records and the NaN advice read it). A post-hook checks the new weights. A bad
step raises NonFiniteStepError before anything is written: no weight, EMA or checkpoint after the
last good step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checkpoints import is_normal_loss
from ..cross_entropy import IGNORE_INDEX
from .nonfinite import nonfinite_count
from .stop_request import StopRequest


class NonFiniteStepError(RuntimeError):
    """Training stopped at `step` because `what` was NaN/inf; the message is one line for the user."""

    def __init__(self, step: int, what: str, losses: dict[int, tuple[float, bool]] | None = None):
        self.step, self.what, self.losses = step, what, dict(losses or {})
        super().__init__(
            f"step {step}: {what}; stopped before the optimizer step, so no weight, EMA or checkpoint was written "
            f"after step {step - 1}"
        )


def _any_rank(flags: torch.Tensor) -> list[float]:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags.tolist()


class StepGuard:
    """Per-step checks and records shared by the loss, the optimizers and the checkpoint hook."""

    def __init__(self) -> None:
        self.enabled = True
        self.total: torch.Tensor | None = None
        self.tokens: torch.Tensor | None = None
        self.stop = StopRequest()
        self.stop_step: int | None = None  # the step every rank agreed to stop after
        self.losses: dict[int, tuple[float, bool]] = {}  # step -> (mean loss, in the normal range)
        self._lowest: float | None = None

    def record(self, loss_sum: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        v = loss_sum.detach().float()
        self.total = v if self.total is None else self.total + v
        if labels is not None:
            n = (labels != IGNORE_INDEX).sum().float()
            self.tokens = n if self.tokens is None else self.tokens + n

    def _remember(self, step: int, loss: float, grads_ok: bool) -> None:
        normal = grads_ok and is_normal_loss(loss, self._lowest)
        self.losses[step] = (loss, normal)
        if normal:
            self._lowest = loss if self._lowest is None else min(self._lowest, loss)

    def check_before_step(self, params: list[torch.Tensor], step: int) -> None:
        """Agree on a requested stop; raise if this step's loss or any gradient is NaN/inf on any rank."""
        loss, tokens = self.total, self.tokens
        self.total = self.tokens = None
        device = params[0].device if params else "cpu"
        zero = torch.zeros((), device=device)
        mean = (loss / tokens.clamp(min=1)) if loss is not None and tokens is not None else loss
        mean = zero if mean is None else mean.to(device).reshape(())
        stop = torch.full((), float(self.stop.requested), device=device)
        if self.enabled:
            bad_loss = (~torch.isfinite(mean)).float()
            bad_grads = nonfinite_count([p.grad for p in params if p.grad is not None]).to(device)
        else:
            bad_loss = bad_grads = zero
        lost, grads, stop_any, worst = _any_rank(torch.stack([bad_loss, bad_grads.reshape(()), stop, mean]))
        if loss is not None:
            self._remember(step, float("nan") if lost else worst, grads_ok=not grads)
        if stop_any and self.stop_step is None:
            self.stop_step = step
        if lost:
            raise NonFiniteStepError(step, "the training loss is NaN/inf", self.losses)
        if grads:
            raise NonFiniteStepError(step, "the gradient norm is NaN/inf (the loss was finite)", self.losses)

    def check_after_step(self, params: list[torch.Tensor], step: int) -> None:
        """Raise if the update itself made a weight NaN/inf (say an absurd learning rate)."""
        if self.enabled and _any_rank(nonfinite_count(params).reshape(1))[0]:
            raise NonFiniteStepError(
                step, "the optimizer step made weights NaN/inf (the gradients were finite)", self.losses
            )

    def losses_since(self, step: int) -> dict[int, tuple[float, bool]]:
        """The recorded losses of the steps after `step` (what a checkpoint keeps of the history)."""
        return {s: v for s, v in self.losses.items() if s > step}
