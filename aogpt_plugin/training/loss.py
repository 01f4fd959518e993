"""The AO training loss, recorded by the step guard.

Training: labels are x[sigma] (batches.py gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.
"""

from __future__ import annotations

import torch

from ..cross_entropy import ao_cross_entropy


def ao_loss_sum(tokenizer: str):
    """The summed AO cross-entropy over `tokenizer`'s real vocabulary (the head's padded rows get no
    mass): the loss of both torchtitan versions."""
    from ..data.tokenizer import load_tokenizer

    vocab_size = load_tokenizer(tokenizer).get_vocab_size()  # as model/args.py sets it

    def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return ao_cross_entropy(pred, labels, vocab_size)

    return loss_fn


def recorded_loss(settings, guard):
    """The run's training loss on torchtitan 0.2.2 (titan022/spec.py's `build_loss_fn`), for the run's
    `settings` (sections.RunSettings): `ao_loss_sum`,
    compiled when `[compile] components` names the loss, every microbatch recorded by `guard` (the
    run's step_guard.StepGuard). 0.3's loss component (titan03/loss.py) compiles and records alike."""
    loss_fn = ao_loss_sum(settings.aogpt.tokenizer)
    if settings.compile.enable and "loss" in settings.compile.components:
        loss_fn = torch.compile(loss_fn, backend=settings.compile.backend)
    guard.enabled = settings.aogpt.nan_check
    guard.total = None

    def watched(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(pred, labels)
        guard.record(loss, labels)
        return loss

    return watched
