"""torchtitan 0.2.2's `build_validator_fn` for AO-GPT: its BaseValidator running the fixed validation
of validation.py and logging it through its MetricsProcessor."""

from __future__ import annotations

import time

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
        logger.info(
            f"aogpt validation: {len(self.fixed.windows)} fixed windows of {val.seq_len} tokens per rank, "
            f"{job_config.aogpt.val_orders} fixed random orders each + left-to-right"
        )

    @torch.no_grad()
    def validate(self, model_parts, step: int) -> None:
        start = time.perf_counter()
        all_reduce = dist.is_initialized() and self.parallel_dims.dp_enabled
        metrics, scored = self.fixed.metrics(
            model_parts[0], utils.device_type, self.validation_context, self.maybe_enable_amp, all_reduce
        )
        headline = metrics.get("validation_metrics/loss_ao", metrics["validation_metrics/loss_l2r"])
        self._log_validation(headline, step, metrics, scored, start)
        logger.info(
            "aogpt validation step %d: %s",
            step,
            "  ".join(f"{k.split('/')[-1]}={v:.4f}" for k, v in metrics.items()),
        )

    def _log_validation(self, loss: float, step: int, metrics: dict, scored: int, start: float) -> None:
        """torchtitan's log_validation divides the tokens counted since its last log by the time since:
        right after the training log that is 0 tokens, so its tps was always 0. Hand it this
        validation's tokens and start time, then give the training counters back, less the
        validation's time, so the next training tps neither loses tokens nor counts validation."""
        mp = self.metrics_processor
        train_tokens, train_since = mp.ntokens_since_last_log, mp.time_last_log
        mp.ntokens_since_last_log, mp.time_last_log = scored, start
        mp.log_validation(loss=loss, step=step, extra_metrics=metrics)
        mp.ntokens_since_last_log = train_tokens
        mp.time_last_log = train_since + (time.perf_counter() - start)


def build_ao_validator(**kwargs) -> AOValidator:
    return AOValidator(**kwargs)
