"""The step guard: it keeps a bad step out of the checkpoints, and the host out of the training step.

One per TrainSpec, handed to both builders (titan022/spec.py), so they share it explicitly and
nothing else can. The loss (loss.py) records every microbatch's loss sum and token count; an
optimizer step pre-hook (optimizers.py) computes, on the device, whether the loss or the gradients
were NaN/inf, whether a stop was requested (SIGTERM/Ctrl-C, stop_request.py), and the step's mean
loss, agreed over the ranks in one all-reduce; a post-hook adds whether the new weights are NaN/inf.
Nothing of it is read on the host inside a step, which would make the GPU wait for the host (issue 63):
the guard reads every pending step's checks at once (`settle`) at the steps torchtitan logs (it reads
the loss there itself), at the last step and before every checkpoint save. Each step's mean loss is
then kept with whether it was in the normal range (the checkpoint records and the NaN advice read
them). A bad step raises NonFiniteStepError at the first read that sees it, before its own optimizer
step when it is a logging step (every step at `--metrics.log_freq 1`), and always before a checkpoint
is written: no checkpoint holds a step after the last good one. A stop request of a single process
is taken at once (nothing to agree on); several ranks agree at the next read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ..checkpoints import is_normal_loss
from ..cross_entropy import IGNORE_INDEX
from .nonfinite import nonfinite_count
from .stop_request import StopRequest

_BAD_WEIGHTS = 4  # a step's flags: bad loss, bad gradients, stop, mean loss, bad weights (each the MAX over the ranks)


class NonFiniteStepError(RuntimeError):
    """Training stopped at `step` because `what` was NaN/inf; the message is one line for the user.
    `found_after`: the step after whose update the guard read it, None when it read it before `step`'s own
    update (a logging step's pre-hook)."""

    def __init__(
        self, step: int, what: str, losses: dict[int, tuple[float, bool]] | None = None, found_after: int | None = None
    ):
        self.step, self.what, self.losses = step, what, dict(losses or {})
        when = (
            "stopped before the optimizer step, so no weight, EMA or checkpoint was written"
            if found_after is None
            else f"found after step {found_after} (the guard reads its checks at the logging steps and before a "
            "checkpoint), so no checkpoint was written"
        )
        super().__init__(f"step {step}: {what}; {when} after step {step - 1}")


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_ranks_max(flags: torch.Tensor) -> torch.Tensor:
    """The MAX over the ranks, on the device (a collective; no host read)."""
    if _world_size() > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags


class StepGuard:
    """Per-step checks and records shared by the loss, the optimizers and the checkpoint hook."""

    def __init__(self) -> None:
        self.enabled = True
        self.total: torch.Tensor | None = None
        self.tokens: torch.Tensor | None = None
        self.stop = StopRequest()
        self.stop_step: int | None = None  # the step every rank agreed to stop after
        self.losses: dict[int, tuple[float, bool]] = {}  # step -> (mean loss, in the normal range)
        self.reads_at: Callable[[int], bool] | None = None  # the steps it reads at (None: every step)
        self.last_step: int | None = None  # the run's last step, read too
        self._pending: list[tuple[int, bool, torch.Tensor]] = []  # (step, loss recorded, flags on the device)
        self._lowest: float | None = None

    def record(self, loss_sum: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        v = loss_sum.detach().float()
        self.total = v if self.total is None else self.total + v
        if labels is not None:
            n = (labels != IGNORE_INDEX).sum().float()
            self.tokens = n if self.tokens is None else self.tokens + n

    def reads(self, step: int) -> bool:
        """Whether the guard reads its pending checks at `step` (torchtitan's logging steps, the last one)."""
        return self.reads_at is None or self.reads_at(step) or step == self.last_step

    def check_before_step(self, params: list[torch.Tensor], step: int) -> None:
        """This step's loss and gradient checks and stop request, agreed over the ranks on the device; at a
        reading step, every pending check is read (`settle`), so a bad step raises before its update."""
        loss, tokens = self.total, self.tokens
        self.total = self.tokens = None
        device = params[0].device if params else "cpu"
        zero = torch.zeros((), device=device)
        mean = (loss / tokens.clamp(min=1)) if loss is not None and tokens is not None else loss
        mean = zero if mean is None else mean.to(device).reshape(())
        if self.stop.requested and self.stop_step is None and _world_size() == 1:
            self.stop_step = step  # one process: nothing to agree on, no read
        stop = torch.full((), float(self.stop.requested), device=device)
        if self.enabled:
            bad_loss = (~torch.isfinite(mean)).float()
            bad_grads = nonfinite_count([p.grad for p in params if p.grad is not None]).to(device).reshape(())
        else:
            bad_loss = bad_grads = zero
        flags = _all_ranks_max(torch.stack([bad_loss, bad_grads, stop, mean, zero]))
        self._pending.append((step, loss is not None, flags))
        if self.reads(step):
            self.settle(step, before_update=True)

    def check_after_step(self, params: list[torch.Tensor], step: int) -> None:
        """Whether the update itself made a weight NaN/inf (say an absurd learning rate), on the device, with
        the step's other checks; read at once at a reading step."""
        if not self.enabled:
            return
        recorded, flags = False, torch.zeros(_BAD_WEIGHTS, device=params[0].device if params else "cpu")
        if self._pending and self._pending[-1][0] == step:
            _, recorded, flags = self._pending.pop()
        bad = _all_ranks_max(nonfinite_count(params).reshape(1).to(flags.device))
        self._pending.append((step, recorded, torch.cat([flags[:_BAD_WEIGHTS], bad])))
        if self.reads(step):
            self.settle(step)

    def settle(self, step: int, before_update: bool = False) -> None:
        """Read every pending step's checks on the host (one read), keep their losses, take an agreed stop
        (after `step`, the step being read at), and raise for the first bad step. Called by the hooks at the
        reading steps (`before_update`: the pre-hook, before `step`'s update) and by the checkpoint save
        before it writes."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        values = torch.stack([flags for _, _, flags in pending]).tolist()
        for (pending_step, recorded, _), (lost, grads, stop, mean, weights) in zip(pending, values, strict=True):
            if recorded:
                self._remember(pending_step, float("nan") if lost else mean, grads_ok=not grads)
            if stop and self.stop_step is None:
                self.stop_step = step
            for bad, what in (
                (lost, "the training loss is NaN/inf"),
                (grads, "the gradient norm is NaN/inf (the loss was finite)"),
                (weights, "the optimizer step made weights NaN/inf (the gradients were finite)"),
            ):
                if bad:
                    updated = step - 1 if before_update else step  # the last step whose update is done
                    found_after = None if pending_step > updated else updated
                    raise NonFiniteStepError(pending_step, what, self.losses, found_after)

    def _remember(self, step: int, loss: float, grads_ok: bool) -> None:
        normal = grads_ok and is_normal_loss(loss, self._lowest)
        self.losses[step] = (loss, normal)
        if normal:
            self._lowest = loss if self._lowest is None else min(self._lowest, loss)

    def losses_since(self, step: int) -> dict[int, tuple[float, bool]]:
        """The recorded losses of the steps after `step` (what a checkpoint keeps of the history)."""
        return {s: v for s, v in self.losses.items() if s > step}
