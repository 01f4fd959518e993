"""The names the shared preflight checks a torchtitan 0.3 config against: the registered datasets (aogpt's
added first, ../text_datasets.py) and the model converters aogpt runs on 0.3 (float8.py)."""

from __future__ import annotations

from ..text_datasets import register_datasets
from .float8 import CONVERTERS


def registered_names() -> dict:
    """preflight.check_settings' `datasets` and `converters`."""
    from torchtitan.hf_datasets.text_datasets import DATASETS

    register_datasets()
    return {"datasets": DATASETS, "converters": CONVERTERS}
