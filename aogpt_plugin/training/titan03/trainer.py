"""The torchtitan 0.3 Trainer for aogpt: its Config adds the `[aogpt]` and `[ema]` sections (the shared
dataclasses of ../sections.py) and types each component as aogpt's.

0.3 components see only their own Config. The run's settings are built once, from the final config
(`run_settings`: a RunSettings of ../sections.py, `[aogpt]`, `[ema]` and the job fields the shared
code reads), by the first `share_settings` (the launcher's parse, launch.py, or else the Trainer),
and that one object is held by the Trainer's Config and the Configs of the tokenizer, dataloader,
loss, validator and model before torchtitan builds them; `[aogpt]` is set in one place, the
Trainer's Config (`--aogpt.order l2r` included). Once torchtitan has built everything, and
before `train()` loads a checkpoint: the loss's step guard goes on the optimizers' step hooks with
the EMA (../optimizers.py), and the checkpointer gets the run's record and the guard
(checkpoint.py). CUDA graphs stay off (recipe.py): a replay would skip the guard's Python
bookkeeping.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

import tyro
from torchtitan.trainer import Trainer

from ...errors import UserError
from ..batches import log_l2r_share
from ..checkpointing import run_record
from ..optimizers import hook_guard_and_emas
from ..sections import (
    AOGPT,
    EMA,
    Checkpoint,
    Compile,
    Job,
    LRScheduler,
    Model,
    Optimizer,
    Parallelism,
    RunSettings,
    SettingsField,
    Training,
    Validation,
    section_of,
)
from ..step_guard import NonFiniteStepError
from .checkpoint import AOGPTCheckpointManager
from .data import AOGPTDataLoader, AOTokenizer
from .float8 import ModelConverters, Quantize, hook_scale_precompute
from .loss import AOLoss
from .optimizers import AOGPTOptimizersContainer
from .validator import AOValidator


class AOGPTTrainer(Trainer):
    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        preflight: Annotated[Callable[[RunSettings, int], None] | None, tyro.conf.Suppress] = None
        """The shared preflight (settings, world size), run by the Trainer before its process group: the stock
        `-m torchtitan.train` entry's config functions hand it over (aogpt_plugin/config_registry.py); the
        launcher checks before any process exists and leaves it None. Not an option on the command line."""

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
        settings: SettingsField = None  # the run's settings (`share_settings`), built once from the rest

        def to_dict(self) -> dict:
            """torchtitan's, with the preflight as whether there is one (its config log and file are JSON)."""
            return {**Trainer.Config.to_dict(self), "preflight": self.preflight is not None}

    def __init__(self, config: Config):
        settings = share_settings(config)
        if config.preflight is not None:
            config.preflight(settings, int(os.environ.get("WORLD_SIZE", "1")))
        super().__init__(config)
        guard, opt = self.loss_fn.guard, self.optimizers
        opt.guard = guard
        guard.reads_at = self.metrics_processor.should_log  # the guard reads where torchtitan reads the loss
        emas = [m.ema for m in self.model_parts if getattr(m, "ema", None) is not None]
        hook_guard_and_emas(opt, opt.steps_done, opt.params, guard, emas)
        for m in self.model_parts:  # after the EMA hooks, as 0.2.2's post-optimizer hooks ran
            if getattr(m, "float8_precompute", False):
                hook_scale_precompute(opt, m)
        if isinstance(self.checkpointer, AOGPTCheckpointManager):
            self.checkpointer.record_of = lambda: run_record(settings)
            self.checkpointer.guard = guard
        _log_lr_under_its_0_2_2_tag(self.lr_schedulers)
        log_l2r_share(self.metrics_processor, settings)

    def train(self) -> None:
        """Under stock `-m torchtitan.train` (its config holds the `preflight`) a non-finite step is a UserError, so
        it ends as one `error:` line (config_registry.py); our launcher words it itself, with the resume command."""
        if self.config.preflight is None:
            return super().train()
        try:
            return super().train()
        except NonFiniteStepError as e:
            raise UserError(str(e)) from None


def run_settings(config: AOGPTTrainer.Config) -> RunSettings:
    """The RunSettings (../sections.py) of an AOGPTTrainer.Config, after the command line is in: 0.3 moved
    some of the keys the shared code reads (`job.dump_folder` -> `dump_folder`, `training.dataset` ->
    `dataloader.dataset`, `validation.*` -> `validator.*`, `model.flavor` -> `model_spec.flavor`);
    here they get the recipe's names back, as titan022/settings.py reads them off a 0.2.2 JobConfig."""
    t, v = config.training, config.validator
    return RunSettings(
        aogpt=config.aogpt,
        ema=config.ema,
        job=Job(dump_folder=config.dump_folder),
        model=Model(
            name=config.model_spec.name, flavor=config.model_spec.flavor, converters=tuple(config.model.converters)
        ),
        training=section_of(
            Training, t, dataset=config.dataloader.dataset, dataset_path=config.dataloader.dataset_path
        ),
        validation=Validation(
            enable=v.enable,
            dataset=v.dataloader.dataset,
            dataset_path=v.dataloader.dataset_path,
            seq_len=v.val_seq_len or t.seq_len,  # 0: the training value (validator.py)
            local_batch_size=v.val_local_batch_size or t.local_batch_size,
            steps=v.steps,
            freq=v.freq,
        ),
        optimizer=section_of(Optimizer, config.optimizer, early_step_in_backward=False),  # 0.3 has no such option
        lr_scheduler=section_of(LRScheduler, config.lr_scheduler),
        parallelism=section_of(Parallelism, config.parallelism),
        checkpoint=section_of(Checkpoint, config.checkpoint),
        compile=section_of(Compile, config.compile),
        float8=config.quantize.linear.float8,
    )


def share_settings(config: AOGPTTrainer.Config) -> RunSettings:
    """The run's settings, built once from the final `config` (the first call: the launcher's parse, or
    the Trainer under stock `-m torchtitan.train`) and held by it and each aogpt component's Config."""
    if config.settings is None:
        config.settings = run_settings(config)
        for part in (config.tokenizer, config.dataloader, config.loss, config.validator, config.model_spec.model):
            part.settings = config.settings
    return config.settings


def _log_lr_under_its_0_2_2_tag(schedulers) -> None:
    """0.3 logs `lr/AdamW/<group>`; the TensorBoard tag `lr` of 0.2.2 runs is kept beside them (both
    groups share one learning rate), so dashboards and scripts read the same tag on both versions."""
    metrics = schedulers.get_metrics

    def get_metrics() -> dict[str, float]:
        return {"lr": float(schedulers.schedulers[0].get_last_lr()[0]), **metrics()}

    schedulers.get_metrics = get_metrics
