"""aogpt's validation as a torchtitan 0.3 validator: the fixed (window, order) pairs of ../validation.py,
scored with the raw and EMA weights and logged through 0.3's MetricsProcessor.

0.3's Validator.Config lost `seq_len` and `local_batch_size` (it validates at the training sizes)
and the Trainer passes those two as build() arguments, which a Config field of the same name would
clash with; the recipe's `validation.seq_len` / `local_batch_size` live on as `val_seq_len` /
`val_local_batch_size` (0: the training value). 0.3 passes no autocast context (nullcontext).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.validate import Validator
from torchtitan.tools import utils
from torchtitan.tools.logging import logger

from ..validation import FixedValidation
from .windows import PackedTextWindows


class AOValidator(Validator):
    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        dataloader: BaseDataLoader.Config = field(default_factory=lambda: BaseDataLoader.Config(dataset="local"))
        """Its dataset and dataset_path (the recipe's validation.dataset / dataset_path)."""

        val_seq_len: int = 0
        val_local_batch_size: int = 0
        val_orders: int = 2
        val_order_seed: int = 1234
        order: str = "mixture"
        use_ema: bool = True

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
        seq_len: int,
        local_batch_size: int,
        **unused,
    ):
        self.config = config
        self.parallel_dims = parallel_dims
        self.validation_context = validation_context
        self.metrics_processor = metrics_processor
        ns = SimpleNamespace
        val = ns(
            dataset=config.dataloader.dataset,
            dataset_path=config.dataloader.dataset_path,
            steps=config.steps,
            seq_len=config.val_seq_len or seq_len,
            local_batch_size=config.val_local_batch_size or local_batch_size,
        )
        view = ns(
            validation=val,
            aogpt=ns(val_orders=config.val_orders, val_order_seed=config.val_order_seed, order=config.order),
            ema=ns(enable=config.use_ema, validate=config.use_ema),
        )

        def windows():
            return PackedTextWindows(val.dataset, val.dataset_path, tokenizer, val.seq_len, dp_rank, dp_world_size)

        self.fixed = FixedValidation(view, dp_rank, windows)
        logger.info(self.fixed.describe(val.seq_len))

    @torch.no_grad()
    def validate(self, model_parts, step: int) -> None:
        all_reduce = dist.is_initialized() and self.parallel_dims.dp_enabled
        self.fixed.validate_and_log(
            model_parts[0], utils.device_type, self.validation_context, contextlib.nullcontext(), all_reduce, step,
            self.metrics_processor, logger.info,
        )  # fmt: skip
