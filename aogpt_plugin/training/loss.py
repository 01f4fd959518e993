"""The AO training loss, recorded by the step guard.

Training: labels are x[sigma] (batches.py gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count. `[aogpt] loss_path`
says where it is computed: on the logits the model returns (`logits`), or in the model's forward,
which batches.py hands the labels and which returns the sum itself (`fused`: the head's GEMM chunked
with the loss, cross_entropy.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..cross_entropy import ao_cross_entropy

if TYPE_CHECKING:
    from .sections import RunSettings


def ao_loss_sum(ao):
    """The summed AO cross-entropy over the real vocabulary of `[aogpt] tokenizer` (the head's padded rows
    get no mass) for `ao` (the run's `[aogpt]` section): the loss of both torchtitan versions."""
    if ao.loss_path == "fused":
        return _summed_by_the_model
    from ..data.tokenizer import load_tokenizer

    vocab_size = load_tokenizer(ao.tokenizer).get_vocab_size()  # as model/args.py sets it

    def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return ao_cross_entropy(pred, labels, vocab_size)

    return loss_fn


def _summed_by_the_model(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The fused path: the model's forward was given `labels` (batches.py) and returned their summed loss."""
    if pred.dim() != 0:
        raise RuntimeError(
            f"[aogpt] loss_path='fused' expects the model to return the summed loss, got a {tuple(pred.shape)} "
            "tensor: the batch did not hand the model its labels"
        )
    return pred


def recorded_loss(settings: RunSettings, guard):
    """The run's training loss on torchtitan 0.2.2 (titan022/spec.py's `build_loss_fn`), for the run's
    `settings` (sections.RunSettings): `ao_loss_sum` of its loss path,
    compiled when `[compile] components` names the loss, every microbatch recorded by `guard` (the
    run's step_guard.StepGuard). 0.3's loss component (titan03/loss.py) compiles and records alike."""
    loss_fn = ao_loss_sum(settings.aogpt)
    if settings.compile.enable and "loss" in settings.compile.components:
        loss_fn = torch.compile(loss_fn, backend=settings.compile.backend)
    guard.enabled = settings.aogpt.nan_check
    guard.last_step = settings.training.steps
    guard.total = None

    def watched(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(pred, labels)
        guard.record(loss, labels)
        return loss

    return watched
