"""The AO training loss as a torchtitan 0.3 loss component, recorded by the step guard.

0.3's BaseLoss contract: `__call__(pred, labels, global_valid_tokens) -> (loss, metrics)`, the loss
already divided by the global token count (0.2.2's Trainer divided the sum itself). The sum is the
shared any-order cross-entropy over the tokenizer's real vocabulary (likelihood.py), and every
microbatch's sum and token count go to the step guard (step_guard.py), which the Trainer then hands
to the optimizers (trainer.py): one guard per run, shared by exactly these two.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchtitan.components.loss import BaseLoss
from torchtitan.config import CompileConfig

from ...likelihood import ao_cross_entropy
from ..step_guard import StepGuard


class AOLoss(BaseLoss):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseLoss.Config):
        vocab_size: int = 50257
        """The tokenizer's vocabulary (the head's padded rows get no mass); set from `[aogpt] tokenizer`."""

        nan_check: bool = True

    def __init__(self, config: Config, *, compile_config: CompileConfig | None = None, **unused):
        vocab_size = config.vocab_size

        def fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return ao_cross_entropy(pred, labels, vocab_size)

        self.fn = fn
        self._maybe_compile(compile_config)
        self.guard = StepGuard()
        self.guard.enabled = config.nan_check

    def __call__(self, pred, labels, global_valid_tokens=None, **kwargs):
        loss_sum = self.fn(pred, labels)
        self.guard.record(loss_sum, labels)
        return (loss_sum if global_valid_tokens is None else loss_sum / global_valid_tokens), {}
