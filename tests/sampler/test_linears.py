"""oneDNN packed Linears: the same numbers as F.linear; the kernel choice and its errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler import SampleConfig
from aogpt_plugin.sampler.linears import PackedLinear, resolve_linear_kernel

from .models import needs_onednn


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (7, 64), (3, 5, 64)])
def test_packed_linear_equals_f_linear(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias)
    x = torch.randn(shape)
    torch.testing.assert_close(PackedLinear(linear)(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
def test_packed_linear_takes_non_contiguous_input():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(4, 64, 6).transpose(1, 2)  # (4, 6, 64), not contiguous
    torch.testing.assert_close(PackedLinear(linear)(x), linear(x))


@needs_onednn
def test_kernel_choice():
    assert resolve_linear_kernel("auto", "cpu", torch.float32) == "onednn"
    assert resolve_linear_kernel("auto", "cpu", torch.bfloat16) == "aten"
    assert resolve_linear_kernel("aten", "cpu", torch.float32) == "aten"


@pytest.mark.parametrize(
    "kernel,dtype,message",
    [
        ("mkl", torch.float32, "linears='mkl' is not supported; allowed: auto, aten, onednn"),
        ("onednn", torch.bfloat16, "linears='onednn' needs float32 on a CPU with oneDNN"),
    ],
)
def test_bad_kernel_is_one_line_error(kernel, dtype, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        resolve_linear_kernel(kernel, "cpu", dtype)
    assert "\n" not in str(info.value)


def test_sample_config_names_a_bad_kernel():
    with pytest.raises(UserError, match="linears='fast' is not supported"):
        SampleConfig(length=8, steps=2, linears="fast").validate(max_positions=40)
