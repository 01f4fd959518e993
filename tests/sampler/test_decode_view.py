"""The sampler's view of a model: same samples with either Linear kernel, the caller's model
untouched, parameters shared, and never stale after the weights change in place."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn

from aogpt_plugin.sampler import SampleConfig, generate
from aogpt_plugin.sampler.decode_view import decode_model
from aogpt_plugin.sampler.encoder_mdm import build_encoder_mdm, encoder_generate
from aogpt_plugin.sampler.linears import PackedLinear
from aogpt_plugin.sampler.modulation import ModulationTable

from .models import build_model, needs_onednn


def _close_traces(a, b):
    for x, y in zip(a.trace, b.trace, strict=True):
        torch.testing.assert_close(x.logits, y.logits, atol=2e-4, rtol=1e-4)


@needs_onednn
@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_onednn_and_aten_sample_the_same_tokens(conditioning):
    model = build_model(conditioning, seed=3)

    def run(linears):
        config = SampleConfig(length=23, steps=7, num_samples=3, counts="binomial", seed=5, linears=linears)
        return generate(model, config, record=True)

    aten, onednn = run("aten"), run("onednn")
    assert torch.equal(aten.tokens, onednn.tokens)
    _close_traces(aten, onednn)


@needs_onednn
def test_encoder_baseline_samples_alike_with_either_kernel():
    from aogpt_plugin.model import AOGPTModelArgs

    args = AOGPTModelArgs(dim=32, n_layers=2, n_heads=2, vocab_size=50, max_seq_len=24)
    model = build_encoder_mdm(args, "cpu")
    aten = encoder_generate(model, 24, 6, batch=2, seed=1, linears="aten").tokens
    assert torch.equal(aten, encoder_generate(model, 24, 6, batch=2, seed=1, linears="onednn").tokens)


@needs_onednn
def test_view_shares_parameters_and_leaves_the_model_alone():
    model = build_model("adaln", seed=1)
    view = decode_model(model, "onednn")
    assert view is decode_model(model, "onednn")  # built once, then reused
    assert view.model is not model and view.tabled and view.linears == "onednn"
    assert all(type(m) not in (PackedLinear, ModulationTable) for m in model.modules())
    assert isinstance(view.model.output, PackedLinear)
    assert isinstance(view.model.layers["0"].attention.wqkv, PackedLinear)
    assert view.model.tok_embeddings.weight is model.tok_embeddings.weight
    assert view.model.layers["0"].attention_norm.weight is model.layers["0"].attention_norm.weight
    aten = decode_model(model, "aten")
    assert type(aten.model.output) is nn.Linear and aten.model.output.weight is model.output.weight


@pytest.mark.parametrize("linears", ["aten", pytest.param("onednn", marks=needs_onednn)])
@pytest.mark.parametrize("changed", ["output.weight", "layers.1.adaln.weight", "target_embeddings.weight"])
def test_weights_written_in_place_are_picked_up(linears, changed):
    """A model that keeps training (or loads new weights) must never sample with the old ones."""
    model = build_model("adaln", seed=1)
    config = SampleConfig(length=20, steps=5, num_samples=2, seed=2, linears=linears)
    before = generate(model, config, record=True)
    with torch.no_grad():
        model.get_parameter(changed).mul_(-1.5)
    after = generate(model, config, record=True)
    fresh = build_model("adaln", seed=1)
    fresh.load_state_dict(model.state_dict())
    reference = generate(fresh, dataclasses.replace(config), record=True)
    assert not torch.equal(before.trace[0].logits, after.trace[0].logits)
    assert torch.equal(after.tokens, reference.tokens)
    _close_traces(after, reference)
