"""The tokenizer and the training dataloader as torchtitan 0.3 components.

The text windows are 0.2.2's (windows.py); the orders, the shuffle buffer and the synthetic source
are the shared ones (batches.py), read from the run's settings (RunSettings, ../sections.py), which
the Trainer hands to both Configs.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer

from ...data.synthetic import MarkovSource, MarkovSpec
from ...data.tokenizer import load_tokenizer
from ..batches import SyntheticWindows, ordered_windows
from ..sections import SettingsField
from .windows import PackedTextWindows


class AOTokenizer(BaseTokenizer):
    """`[aogpt] tokenizer` (tiktoken encoding, tokenizer.json or symbols:V: data/tokenizer.py)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        settings: SettingsField = None

    def __init__(self, config: Config, *, tokenizer_path: str | None = None, **unused):
        super().__init__()
        self.inner = load_tokenizer(config.settings.aogpt.tokenizer)
        self.eos_id = getattr(self.inner, "eos_id", None)
        self.bos_id = getattr(self.inner, "bos_id", None)

    def encode(self, *args, **kwargs) -> list[int]:
        return self.inner.encode(*args, **kwargs)

    def decode(self, *args, **kwargs) -> str:
        return self.inner.decode(*args, **kwargs)

    def get_vocab_size(self) -> int:
        return self.inner.get_vocab_size()


class AOGPTDataLoader(ParallelAwareDataloader):
    """The packed text (or synthetic) windows of `dataset`, in the orders of `[aogpt]`."""

    @dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "local"
        infinite: bool = True
        settings: SettingsField = None

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer,
        seq_len: int,
        local_batch_size: int,
        snapshot_every_n_steps: int | None = 1,
        **unused,
    ):
        if config.dataset == "synthetic":
            base = SyntheticWindows(MarkovSource(MarkovSpec.parse(config.dataset_path)), seq_len, dp_rank)
        else:
            base = PackedTextWindows(
                config.dataset, config.dataset_path, tokenizer, seq_len, dp_rank, dp_world_size, config.infinite
            )
        super().__init__(
            ordered_windows(base, config.settings, dp_rank, config.infinite, dp_world_size),
            dp_rank=dp_rank,
            dp_world_size=dp_world_size,
            batch_size=local_batch_size,
            num_workers=config.num_workers,
            persistent_workers=config.persistent_workers,
            pin_memory=config.pin_memory,
            prefetch_factor=config.prefetch_factor,
        )  # snapshot_every_n_steps left at 1, as 0.2.2 did
