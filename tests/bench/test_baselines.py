"""The baselines the sampler is timed against: the encoder-only MDM (bidirectional, time-free, T
full-sequence forwards) and plain AR KV-cache decoding (against the uncached causal forward)."""

from __future__ import annotations

import pytest
import torch
from conftest import needs_onednn

from aogpt_plugin.bench.baselines import ar_generate, build_encoder_mdm, encoder_forwards, encoder_generate
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


@pytest.mark.parametrize("graphs", ["off", "static"])
def test_a_run_cut_short_runs_that_many_of_the_full_runs_forwards(graphs):
    """`forwards=k` (the bench's per-forward timing) runs the full run's first k forwards, and
    encoder_forwards counts the full run's without running it."""
    model = build_encoder_mdm(ARGS, "cpu")
    for steps, counts in ((24, "deterministic"), (6, "binomial")):
        full = encoder_generate(model, 24, steps, batch=3, counts=counts, seed=1, graphs=graphs)
        assert encoder_forwards(24, steps, 3, counts=counts, seed=1) == full.forward_passes
        cut = encoder_generate(model, 24, steps, batch=3, counts=counts, seed=1, graphs=graphs, forwards=2)
        assert cut.forward_passes == 2 and (cut.tokens == model.mask_id).any()


def _encoder_forward_work(n: int, steps: int, batch: int = 2) -> tuple[list[str], float]:
    """The aten ops and FLOPs of one encoder forward of a T=`steps` run of `small` at n, on the meta device
    (shapes only: no weights are made)."""
    from conftest import kernel_ops
    from torch.utils.flop_counter import FlopCounterMode

    from aogpt_plugin.bench.baselines import StaticEncoder, encoder_plan, encoder_step
    from aogpt_plugin.model import FLAVORS

    model = build_encoder_mdm(FLAVORS["small"], "meta")
    state = StaticEncoder(model, batch, n, "static")
    orders, per_step, _ = encoder_plan(n, steps, batch)
    state.start(orders.to("meta"), per_step, torch.zeros(batch, dtype=torch.long, device="meta"))
    rows = torch.arange(int(per_step[:, 1].max()), device="meta")  # a step past the first
    with FlopCounterMode(display=False) as flops:
        ops = kernel_ops(lambda: encoder_step(state, rows, SamplingParams()))
    return ops, flops.get_total_flops()


def test_an_encoder_forward_is_the_same_work_at_every_t():
    """Why `aogpt bench sampler` times a few encoder forwards and multiplies by T's count: at `small`, n=1024,
    a forward of T=n/4 or n/16 runs the same kernels as one of T=n, and its FLOPs differ by the head's and
    the draw's rows only, under 1% (the bidirectional pass over all n positions is all but the whole); a
    forward over half the positions is visibly less work (the check can fail)."""
    ops, flops = _encoder_forward_work(1024, 1024)
    for steps in (256, 64):
        other_ops, other_flops = _encoder_forward_work(1024, steps)
        assert other_ops == ops and 1 <= other_flops / flops < 1.01, (steps, other_flops / flops)
    assert _encoder_forward_work(512, 512)[1] / flops < 0.6


@needs_onednn
def test_encoder_baseline_samples_alike_with_either_kernel():
    args = AOGPTModelArgs(dim=32, n_layers=2, n_heads=2, vocab_size=50, max_seq_len=24)
    model = build_encoder_mdm(args, "cpu")
    aten = encoder_generate(model, 24, 6, batch=2, seed=1, linears="aten").tokens
    assert torch.equal(aten, encoder_generate(model, 24, 6, batch=2, seed=1, linears="onednn").tokens)


@pytest.mark.parametrize("backend", ["sdpa", pytest.param("flex", marks=pytest.mark.slow)])
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


# `on` (inductor on a CPU, 40 s with a cold cache) in make test-slow; the GPU check's plan A runs it compiled by default
@pytest.mark.parametrize("graphs", ["static", pytest.param("on", marks=pytest.mark.slow)])
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
