"""Fixtures shared by the evaluation tests."""

import pytest

from aogpt_plugin.model import AOGPT

from .tiny_models import build_model


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="module")
def model() -> AOGPT:
    return build_model()
