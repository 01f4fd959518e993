"""torchtitan 0.2.2's `build_dataloader_fn` for AO-GPT: its text windows (or the synthetic source's) in
sampled orders (batches.py), batched by its ParallelAwareDataloader."""

from __future__ import annotations

from dataclasses import asdict

from ...data.synthetic import MarkovSource, MarkovSpec
from ..batches import SyntheticWindows, ordered_windows


def text_windows(section, tokenizer, dp_rank: int, dp_world_size: int, infinite: bool):
    """The text of `section` ([training] or [validation]) packed into windows by torchtitan 0.2.2."""
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

    training = job_config.training
    if training.dataset == "synthetic":
        base = SyntheticWindows(MarkovSource(MarkovSpec.parse(training.dataset_path)), training.seq_len, dp_rank)
    else:
        base = text_windows(training, tokenizer, dp_rank, dp_world_size, infinite)
    dataset = ordered_windows(base, job_config, dp_rank, infinite, dp_world_size)
    kwargs = {**asdict(training.dataloader), "batch_size": training.local_batch_size}
    return ParallelAwareDataloader(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, **kwargs)
