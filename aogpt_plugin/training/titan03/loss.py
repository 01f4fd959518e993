"""The AO training loss as a torchtitan 0.3 loss component, recorded by the step guard.

0.3's BaseLoss contract: `__call__(pred, labels, global_valid_tokens) -> (loss, metrics)`, the loss
already divided by the global token count (0.2.2's Trainer divided the sum itself). The sum is the
shared any-order cross-entropy over the vocabulary of `[aogpt] tokenizer` (../loss.py, cross_entropy.py;
the head's padded rows get no mass), on the logits or the model's own under `[aogpt] loss_path = "fused"`,
read from the run's settings (RunSettings, ../sections.py), and every
microbatch's sum and token count go to the step guard (step_guard.py), which the Trainer then hands
to the optimizers (trainer.py): one guard per run, shared by exactly these two.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.loss import BaseLoss
from torchtitan.config import CompileConfig

from ..loss import ao_loss_sum
from ..sections import SettingsField
from ..step_guard import StepGuard


class AOLoss(BaseLoss):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseLoss.Config):
        settings: SettingsField = None

    def __init__(self, config: Config, *, compile_config: CompileConfig | None = None, **unused):
        ao = config.settings.aogpt
        self.fn = ao_loss_sum(ao)
        self._maybe_compile(compile_config)
        self.guard = StepGuard()
        self.guard.enabled = ao.nan_check
        self.guard.last_step = config.settings.training.steps

    def __call__(self, pred, labels, global_valid_tokens=None, **kwargs):
        loss_sum = self.fn(pred, labels)
        self.guard.record(loss_sum, labels)
        return (loss_sum if global_valid_tokens is None else loss_sum / global_valid_tokens), {}
