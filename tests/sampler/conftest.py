"""Fixtures of the sampler tests."""

import pytest

from .models import build_model


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="session")
def ao_model():
    return build_model("adaln")


@pytest.fixture(scope="session")
def gpt_model():
    return build_model("none")
