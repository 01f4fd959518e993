"""Fixtures shared by the evaluation tests."""

import pytest
from conftest import tiny_model

from aogpt_plugin.model import AOGPT


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="module")
def model() -> AOGPT:
    return tiny_model(preset="eval")
