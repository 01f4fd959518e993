"""Fixtures of the benchmark and baseline tests (the models: tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""
