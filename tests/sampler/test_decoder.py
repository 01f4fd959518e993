"""Backend choice, the CPU flex guard, and one compiled flex instance without per-step recompiles."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler import SampleConfig, generate
from aogpt_plugin.sampler.choices import resolve_backend


def test_auto_backend_per_device():
    assert resolve_backend("auto", "cpu") == "sdpa"
    assert resolve_backend("auto", "cuda") == "flex"
    with pytest.raises(UserError, match="backend="):
        resolve_backend("xformers", "cpu")


def test_flex_on_cpu_refuses_small_head_dim():
    model = tiny_model(max_seq_len=16, preset="sampler")
    model.model_args.n_heads = 4  # head_dim 16: compiled CPU flex is wrong there in torch 2.13
    with pytest.raises(UserError, match="head_dim=16"):
        generate(model, SampleConfig(length=8, steps=2, backend="flex"))


def test_flex_steps_do_not_recompile(ao_model):
    warm = [(20, 20, "deterministic"), (20, 4, "binomial")]  # q_len 1 and > 1 (dynamic shapes specialise 1)
    for n, steps, counts in warm:
        generate(ao_model, SampleConfig(length=n, steps=steps, num_samples=2, counts=counts, backend="flex"))
    with torch._dynamo.config.patch(error_on_recompile=True):
        for n, steps, counts, batch in [(17, 5, "binomial", 2), (31, 9, "deterministic", 2), (40, 13, "binomial", 2)]:
            result = generate(
                ao_model, SampleConfig(length=n, steps=steps, num_samples=batch, counts=counts, backend="flex")
            )
            assert result.tokens.shape == (batch, n)
