"""The AO training loss in torchtitan's contract, and the guard that keeps a bad step out of the weights.

Training: labels are x[sigma] (the dataloader gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.

StepGuard: one per TrainSpec, handed to both builders (train_spec.py), so they share it explicitly
and nothing else can. The loss records every microbatch's loss sum and token count; before each
optimizer step the optimizers container asks the guard, in one all-reduce over the ranks, whether the
loss or the gradients were NaN/inf anywhere, whether a stop was requested anywhere (SIGTERM/Ctrl-C,
stop_request.py), and the step's mean loss, kept per step with whether it was in the normal range
(the checkpoint records and the NaN advice read it). After the step it checks the new weights. A bad
step raises NonFiniteStepError before anything is written: no weight, EMA or checkpoint after the
last good step.
"""

from __future__ import annotations

from itertools import chain

import torch
import torch.distributed as dist

from .checkpoints import is_normal_loss
from .ema import clean_fqn, local_tensor
from .errors import UserError
from .likelihood import IGNORE_INDEX, ao_cross_entropy
from .stop_request import StopRequest


class NonFiniteStepError(RuntimeError):
    """Training stopped at `step` because `what` was NaN/inf; the message is one line for the user."""

    def __init__(self, step: int, what: str, losses: dict[int, tuple[float, bool]] | None = None):
        self.step, self.what, self.losses = step, what, dict(losses or {})
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
    """torchtitan `build_loss_fn`: the summed AO cross-entropy over the tokenizer's real vocabulary (the
    head's padded rows get no mass), optionally compiled, recorded by `guard`."""
    from .data.tokenizer import load_tokenizer

    vocab_size = load_tokenizer(job_config.aogpt.tokenizer).get_vocab_size()  # as model/args.py sets it

    def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return ao_cross_entropy(pred, labels, vocab_size)

    if job_config.compile.enable and "loss" in job_config.compile.components:
        loss_fn = torch.compile(loss_fn, backend=job_config.compile.backend)
    guard.enabled = job_config.aogpt.nan_check
    guard.total = None

    def watched(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(pred, labels)
        guard.record(loss, labels)
        return loss

    return watched
