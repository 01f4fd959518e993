"""Model args: validation messages and the FLOP count torchtitan uses for MFU."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.model import FLAVORS, AOGPTModelArgs


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_flops_per_token_match_a_flop_counter(conditioning):
    """6 x matmul params + 12 L d n per token equals counted fwd+bwd matmul/attention FLOPs."""
    model = tiny_model(conditioning, max_seq_len=16)
    n, bsz = 16, 2
    tokens = torch.randint(0, 61, (bsz, n))
    order = torch.stack([torch.randperm(n) for _ in range(bsz)])
    # the math SDPA backend decomposes into bmm's the counter sees (the CPU flash kernel is not counted)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens, order=order).sum().backward()
    _, per_token = model.model_args.get_nparams_and_flops(model, n)
    # the counter sees causal SDPA as dense, exactly the convention torchtitan uses
    assert counter.get_total_flops() == per_token * bsz * n


def test_param_count_of_paper_sizes():
    """Untied head and adaLN make the nominal 124M/350M models ~171M/426M (reference.md §1)."""
    with torch.device("meta"):
        from aogpt_plugin.model import AOGPT

        small = sum(p.numel() for p in AOGPT(FLAVORS["small"]).parameters())
        medium = sum(p.numel() for p in AOGPT(FLAVORS["medium"]).parameters())
    assert 170e6 < small < 172e6 and 425e6 < medium < 427e6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"conditioning": "film"}, "aogpt.conditioning='film' is not supported"),
        ({"dim": 30, "n_heads": 4}, "dim=30 must be divisible by n_heads=4"),
        ({"n_layers": 0}, "model.n_layers=0 must be >= 1"),
    ],
)
def test_bad_args_raise(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        AOGPTModelArgs(**kwargs)


def test_round_trip_dict():
    args = FLAVORS["tiny"]
    assert AOGPTModelArgs.from_dict(args.to_dict()) == args
    with pytest.raises(ConfigError, match="unknown model args"):
        AOGPTModelArgs.from_dict({**args.to_dict(), "rope": True})
