"""torchtitan 0.2.2's `build_validator_fn` for AO-GPT: its BaseValidator running the fixed validation
of validation.py and logging it through its MetricsProcessor."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torchtitan.components.validate import BaseValidator
from torchtitan.tools import utils
from torchtitan.tools.logging import logger

from ..validation import FixedValidation
from .dataloader import text_windows


class AOValidator(BaseValidator):
    def __init__(
        self,
        job_config,
        dp_world_size,
        dp_rank,
        tokenizer,
        parallel_dims,
        loss_fn,
        validation_context,
        maybe_enable_amp,
        metrics_processor,
        **unused,
    ):
        super().__init__(job_config)
        self.parallel_dims = parallel_dims
        self.validation_context = validation_context
        self.maybe_enable_amp = maybe_enable_amp
        self.metrics_processor = metrics_processor
        val = job_config.validation
        self.fixed = FixedValidation(
            job_config, dp_rank, lambda: text_windows(val, tokenizer, dp_rank, dp_world_size, infinite=False)
        )
        logger.info(self.fixed.describe(val.seq_len))

    @torch.no_grad()
    def validate(self, model_parts, step: int) -> None:
        all_reduce = dist.is_initialized() and self.parallel_dims.dp_enabled
        self.fixed.validate_and_log(
            model_parts[0], utils.device_type, self.validation_context, self.maybe_enable_amp, all_reduce, step,
            self.metrics_processor, logger.info,
        )  # fmt: skip


def build_ao_validator(**kwargs) -> AOValidator:
    return AOValidator(**kwargs)
