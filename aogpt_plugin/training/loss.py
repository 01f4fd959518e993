"""The AO training loss in torchtitan's `build_loss_fn` contract, recorded by the step guard.

Training: labels are x[sigma] (batches.py gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.
"""

from __future__ import annotations

import torch

from ..likelihood import ao_cross_entropy
from .step_guard import StepGuard


def build_ao_loss(job_config, guard: StepGuard, **kwargs):
    """torchtitan `build_loss_fn`: the summed AO cross-entropy over the tokenizer's real vocabulary (the
    head's padded rows get no mass), optionally compiled, recorded by `guard`."""
    from ..data.tokenizer import load_tokenizer

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
