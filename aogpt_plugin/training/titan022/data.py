"""What a torchtitan 0.2.2 run reads its text with: its `build_tokenizer_fn` (`[aogpt] tokenizer`), its
`build_dataloader_fn` (the text windows, or the synthetic source's, in sampled orders: batches.py,
batched by its ParallelAwareDataloader) and its `build_validator_fn` (a BaseValidator running the
fixed validation of validation.py on the validation text's windows and logging it through its
MetricsProcessor). Each reads the run's settings (settings.py) off the JobConfig it receives."""

from __future__ import annotations

from dataclasses import asdict

import torch
import torch.distributed as dist
from torchtitan.components.validate import BaseValidator
from torchtitan.tools import utils
from torchtitan.tools.logging import logger

from ...data.synthetic import MarkovSource, MarkovSpec
from ...data.tokenizer import load_tokenizer
from ..batches import SyntheticWindows, ordered_windows
from ..validation import FixedValidation
from .settings import share_settings


def build_tokenizer(job_config):
    return load_tokenizer(share_settings(job_config).aogpt.tokenizer)


def text_windows(section, tokenizer, dp_rank: int, dp_world_size: int, infinite: bool):
    """The text of `section` (the settings' training or validation) packed into windows by torchtitan 0.2.2."""
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

    return HuggingFaceTextDataset(
        dataset_name=section.dataset,
        dataset_path=section.dataset_path,
        tokenizer=tokenizer,
        seq_len=section.seq_len,
        dp_rank=dp_rank,
        dp_world_size=dp_world_size,
        infinite=infinite,
    )


def build_ordered_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite: bool = True):
    """The packed text stream of `[training]`, in sampled orders."""
    from torchtitan.components.dataloader import ParallelAwareDataloader

    settings = share_settings(job_config)
    training = settings.training
    if training.dataset == "synthetic":
        base = SyntheticWindows(MarkovSource(MarkovSpec.parse(training.dataset_path)), training.seq_len, dp_rank)
    else:
        base = text_windows(training, tokenizer, dp_rank, dp_world_size, infinite)
    dataset = ordered_windows(base, settings, dp_rank, infinite, dp_world_size)
    kwargs = {**asdict(job_config.training.dataloader), "batch_size": training.local_batch_size}
    return ParallelAwareDataloader(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, **kwargs)


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
        settings = share_settings(job_config)
        val = settings.validation
        self.fixed = FixedValidation(
            settings, dp_rank, lambda: text_windows(val, tokenizer, dp_rank, dp_world_size, infinite=False)
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
