"""The torchtitan 0.3 Trainer for aogpt: its Config adds the `[aogpt]` and `[ema]` sections (the shared
dataclasses of ../sections.py) and types each component as aogpt's.

0.3 components see only their own Config, so `[aogpt]` (the one place a user sets the AO options,
`--aogpt.order l2r` included) is copied into the dataloader, tokenizer, loss and validator Configs
after every parse (`__post_init__`, which tyro runs on the CLI-built instance); the model gets it
in `update_from_config`. Once torchtitan has built everything, and before `train()` loads a
checkpoint: the loss's step guard goes on the optimizers' step hooks with the EMA
(../optimizers.py), and the checkpointer gets the run's record and the guard (checkpoint.py).
CUDA graphs stay off (recipe.py): a replay would skip the guard's Python bookkeeping.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from torchtitan.trainer import Trainer

from ...data.tokenizer import load_tokenizer
from ...errors import UserError
from ..checkpoint_record import run_record
from ..optimizers import hook_guard_and_emas
from ..sections import AOGPT, EMA
from ..step_guard import NonFiniteStepError
from .checkpoint import AOGPTCheckpointManager
from .data import AOGPTDataLoader, AOTokenizer
from .float8 import ModelConverters, Quantize, hook_scale_precompute
from .loss import AOLoss
from .optimizers import AOGPTOptimizersContainer
from .validator import AOValidator
from .view import job_view


class AOGPTTrainer(Trainer):
    # The shared preflight (view, world size) -> None, run before the process group when the entry
    # point has not run it already: aogpt_plugin/config_registry.py sets it for stock
    # `-m torchtitan.train`; the launcher checks before any process exists and leaves it None.
    preflight: Callable | None = None

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        aogpt: AOGPT = field(default_factory=AOGPT)
        ema: EMA = field(default_factory=EMA)
        dataloader: AOGPTDataLoader.Config = field(default_factory=AOGPTDataLoader.Config)
        optimizer: AOGPTOptimizersContainer.Config = field(default_factory=AOGPTOptimizersContainer.Config)
        tokenizer: AOTokenizer.Config = field(default_factory=AOTokenizer.Config)
        loss: AOLoss.Config = field(default_factory=AOLoss.Config)
        validator: AOValidator.Config = field(default_factory=AOValidator.Config)
        checkpoint: AOGPTCheckpointManager.Config = field(default_factory=AOGPTCheckpointManager.Config)
        model: ModelConverters = field(default_factory=ModelConverters)  # 0.2.2's `model.converters`
        quantize: Quantize = field(default_factory=Quantize)  # 0.2.2's `[quantize.linear.float8]` (float8.py)

        def __post_init__(self) -> None:
            Trainer.Config.__post_init__(self)
            self.sync_aogpt()

        def sync_aogpt(self) -> None:
            ao, ema = self.aogpt, self.ema
            for key in ("order", "p_l2r", "order_seed", "shuffle_windows"):
                setattr(self.dataloader, key, getattr(ao, key))
            self.tokenizer.spec = ao.tokenizer
            self.loss.nan_check = ao.nan_check
            self.validator.val_orders, self.validator.val_order_seed = ao.val_orders, ao.val_order_seed
            self.validator.order = ao.order
            self.validator.use_ema = ema.enable and ema.validate

    def __init__(self, config: Config):
        view = job_view(config)
        if AOGPTTrainer.preflight is not None:
            AOGPTTrainer.preflight(view, int(os.environ.get("WORLD_SIZE", "1")))
        config.sync_aogpt()
        config.loss.vocab_size = load_tokenizer(config.aogpt.tokenizer).get_vocab_size()
        super().__init__(config)
        guard, opt = self.loss_fn.guard, self.optimizers
        opt.guard = guard
        emas = [m.ema for m in self.model_parts if getattr(m, "ema", None) is not None]
        hook_guard_and_emas(opt, opt.steps_done, opt.params, guard, emas)
        for m in self.model_parts:  # after the EMA hooks, as 0.2.2's post-optimizer hooks ran
            if getattr(m, "float8_precompute", False):
                hook_scale_precompute(opt, m)
        if isinstance(self.checkpointer, AOGPTCheckpointManager):
            self.checkpointer.record_of = lambda: run_record(job_view(config))
            self.checkpointer.guard = guard
        _log_lr_as_0_2_2_did(self.lr_schedulers)

    def train(self) -> None:
        """Under stock `-m torchtitan.train` (preflight set) a non-finite step is a UserError, so it ends
        as one `error:` line (config_registry.py); our launcher words it itself, with the resume command."""
        if AOGPTTrainer.preflight is None:
            return super().train()
        try:
            return super().train()
        except NonFiniteStepError as e:
            raise UserError(str(e)) from None


def _log_lr_as_0_2_2_did(schedulers) -> None:
    """0.3 logs `lr/AdamW/<group>`; the TensorBoard tag `lr` of 0.2.2 runs is kept beside them (both
    groups share one learning rate), so dashboards and scripts read the same tag on both versions."""
    metrics = schedulers.get_metrics

    def get_metrics() -> dict[str, float]:
        return {"lr": float(schedulers.schedulers[0].get_last_lr()[0]), **metrics()}

    schedulers.get_metrics = get_metrics
