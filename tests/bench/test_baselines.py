"""The baselines the sampler is timed against: the encoder-only MDM (bidirectional, time-free, T
full-sequence forwards) and plain AR KV-cache decoding (against the uncached causal forward)."""

from __future__ import annotations

import pytest
import torch
from conftest import needs_onednn

from aogpt_plugin.bench.baselines import ar_generate, build_encoder_mdm, encoder_generate
from aogpt_plugin.model import AOGPTModelArgs
from aogpt_plugin.sampler import SamplingParams

ARGS = AOGPTModelArgs(dim=32, n_layers=2, n_heads=4, vocab_size=61, max_seq_len=32)


def test_encoder_is_bidirectional():
    torch.manual_seed(0)
    model = build_encoder_mdm(ARGS, "cpu")
    x = torch.full((1, 12), model.mask_id)
    changed = x.clone()
    changed[0, 11] = 3
    with torch.inference_mode():
        assert not torch.allclose(model(x)[0, 0], model(changed)[0, 0])  # position 0 sees position 11


def test_encoder_sampler_fills_everything_in_steps_forwards():
    torch.manual_seed(0)
    model = build_encoder_mdm(ARGS, "cpu")
    for steps, counts in ((24, "deterministic"), (6, "deterministic"), (6, "binomial")):
        result = encoder_generate(model, 24, steps, batch=3, counts=counts, seed=1)
        assert result.tokens.shape == (3, 24)
        assert (result.tokens >= 0).all() and (result.tokens < 61).all()  # no [MASK] left
        assert result.forward_passes <= steps
        if counts == "deterministic":
            assert result.forward_passes == steps
    same = encoder_generate(model, 24, 6, batch=3, seed=1).tokens
    assert torch.equal(same, encoder_generate(model, 24, 6, batch=3, seed=1).tokens)


@needs_onednn
def test_encoder_baseline_samples_alike_with_either_kernel():
    args = AOGPTModelArgs(dim=32, n_layers=2, n_heads=2, vocab_size=50, max_seq_len=24)
    model = build_encoder_mdm(args, "cpu")
    aten = encoder_generate(model, 24, 6, batch=2, seed=1, linears="aten").tokens
    assert torch.equal(aten, encoder_generate(model, 24, 6, batch=2, seed=1, linears="onednn").tokens)


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_greedy_ar_decode_equals_uncached_greedy(gpt_model, backend):
    n = 14
    result = ar_generate(gpt_model, n, batch=2, sampling=SamplingParams(top_k=1), backend=backend)
    tokens = torch.zeros(2, n, dtype=torch.long)
    for j in range(n):
        tokens[:, j] = gpt_model(tokens)[:, j, :61].argmax(-1)
    assert torch.equal(result.tokens, tokens)
    assert result.forward_passes == n


def test_ar_decode_is_seeded(gpt_model):
    def run(seed):
        return ar_generate(gpt_model, 10, batch=2, seed=seed).tokens

    assert torch.equal(run(0), run(0)) and not torch.equal(run(0), run(1))


@pytest.mark.parametrize("graphs", ["static", "on"])
def test_the_static_encoder_step_samples_what_the_loop_samples(graphs):
    """The encoder baseline gets the AO sampler's treatment (fixed buffers, a captured step) and keeps
    its samples; a second run reuses the same state."""
    torch.manual_seed(0)
    model = build_encoder_mdm(ARGS, "cpu")
    for steps, counts in ((24, "deterministic"), (6, "binomial")):
        ref = encoder_generate(model, 24, steps, batch=3, counts=counts, seed=1, linears="aten")
        for _ in range(2):
            got = encoder_generate(model, 24, steps, batch=3, counts=counts, seed=1, linears="aten", graphs=graphs)
            assert torch.equal(got.tokens, ref.tokens) and got.forward_passes == ref.forward_passes


@pytest.mark.parametrize("graphs", ["static", "on"])
def test_ar_decoding_with_graphs_is_the_static_step_in_left_to_right_order(gpt_model, graphs):
    """What the benchmark times as AR with graphs on: generate at T=n, identity order, on the plain GPT,
    sampling exactly what the gpt-fast decode loop samples with the same seeds (the same noise)."""
    from aogpt_plugin.sampler import SampleConfig, generate

    n = 16
    config = SampleConfig(length=n, steps=n, num_samples=3, order="l2r", seed=9, graphs=graphs)
    ar = ar_generate(gpt_model, n, batch=3, seed=9)
    assert torch.equal(generate(gpt_model, config).tokens, ar.tokens)
