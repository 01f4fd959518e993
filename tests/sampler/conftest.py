"""Fixtures of the sampler tests."""

import pytest
import torch

from .models import build_model


@pytest.fixture(autouse=True)
def one_thread():
    """The tests' models are tiny: one intra-op thread avoids OpenMP spin-waits on a shared CPU (25x here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def ao_model():
    return build_model("adaln")


@pytest.fixture(scope="session")
def gpt_model():
    return build_model("none")
