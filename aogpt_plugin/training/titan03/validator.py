"""aogpt's validation as a torchtitan 0.3 validator: the fixed (window, order) pairs of ../validation.py,
scored with the raw and EMA weights and logged through 0.3's MetricsProcessor.

0.3's Validator.Config lost `seq_len` and `local_batch_size` (it validates at the training sizes)
and the Trainer passes those two as build() arguments, which a Config field of the same name would
clash with; the recipe's `validation.seq_len` / `local_batch_size` live on as `val_seq_len` /
`val_local_batch_size` (0: the training value), resolved in the run's settings (RunSettings, ../sections.py),
which hold `[aogpt]` and `[ema]` too. 0.3 passes no autocast context (nullcontext).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.validate import Validator
from torchtitan.tools import utils
from torchtitan.tools.logging import logger

from ..sections import SettingsField
from ..validation import FixedValidation
from .windows import PackedTextWindows


class AOValidator(Validator):
    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        dataloader: BaseDataLoader.Config = field(default_factory=lambda: BaseDataLoader.Config(dataset="local"))
        """Its dataset and dataset_path (the recipe's validation.dataset / dataset_path)."""

        val_seq_len: int = 0
        val_local_batch_size: int = 0
        settings: SettingsField = None

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer,
        parallel_dims,
        validation_context,
        metrics_processor,
        **unused,
    ):
        self.config = config
        self.parallel_dims = parallel_dims
        self.validation_context = validation_context
        self.metrics_processor = metrics_processor
        val = config.settings.validation

        def windows():
            return PackedTextWindows(val.dataset, val.dataset_path, tokenizer, val.seq_len, dp_rank, dp_world_size)

        self.fixed = FixedValidation(config.settings, dp_rank, windows)
        logger.info(self.fixed.describe(val.seq_len))

    @torch.no_grad()
    def validate(self, model_parts, step: int) -> None:
        all_reduce = dist.is_initialized() and self.parallel_dims.dp_enabled
        self.fixed.validate_and_log(
            model_parts[0], utils.device_type, self.validation_context, contextlib.nullcontext(), all_reduce, step,
            self.metrics_processor, logger.info,
        )  # fmt: skip
