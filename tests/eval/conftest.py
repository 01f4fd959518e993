"""Fixtures shared by the evaluation tests."""

import pytest
import torch

from aogpt_plugin.model import AOGPT

from .tiny_models import build_model


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """The tiny models' ops are far too small for intra-op threads; on a shared CPU they only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> AOGPT:
    return build_model()
