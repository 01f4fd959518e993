"""aogpt's datasets in torchtitan 0.3's table, and the names preflight checks against. Called by the
entry points (launch.py, aogpt_plugin/config_registry.py) before a config is checked or built."""

from __future__ import annotations

from ..text_datasets import DATASETS as AOGPT_DATASETS


def register_datasets() -> None:
    """Add aogpt's datasets (text_datasets.py) to torchtitan's DATASETS (idempotent)."""
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    for name, (path, loader, text) in AOGPT_DATASETS.items():
        DATASETS.setdefault(name, DatasetConfig(path=path, loader=loader, sample_processor=text))


def registered_names() -> dict:
    """The datasets and model converters preflight checks against."""
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from .float8 import CONVERTERS

    register_datasets()
    return {"datasets": DATASETS, "converters": CONVERTERS}
