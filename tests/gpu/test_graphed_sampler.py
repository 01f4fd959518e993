"""The static decode step replayed from CUDA graphs, on a GPU only (`pytest -m gpu`; scripts/gpu_check.sh's
sampler part): replay == the eager static step bitwise, no host sync while the steps run, the dynamic
sampler's tokens on the sharp fixture, a mixed batch's rows equal to their batches of one, FlexDecoding
as the lowered attention kernel with the `--decode-attention` setting's options in it and every setting's
tokens alike, and the compiled draw's argmax in two reductions (plan A of the GPU check runs
`-k "split_argmax or flex_decoding or decode_attention"`)."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import tiny_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on the GPU machine)"),
]


def _small(dtype=torch.bfloat16):
    from aogpt_plugin.bench.baselines import build_decoder

    return build_decoder("small", "adaln", "cuda", dtype)


CASES = [dict(steps=64, counts="deterministic"), dict(steps=16, counts="binomial")]  # T = n and n/4, n = 64


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("case", CASES, ids=["T=n", "T=n/4-binomial"])
def test_graph_replay_equals_the_eager_static_step_bitwise(batch, case):
    """`small` in bf16: the captured step gives the eager static step's tokens and logits bit for bit
    (same kernels, same shapes)."""
    from aogpt_plugin.sampler import SampleConfig, generate

    model = _small()
    runs = {}
    for graphs in ("static", "on"):
        config = SampleConfig(length=64, num_samples=batch, seed=7, graphs=graphs, **case)
        generate(model, config)  # warm-up: every step shape captured
        runs[graphs] = generate(model, config, record=True)
    eager, replayed = runs["static"], runs["on"]
    assert torch.equal(replayed.tokens, eager.tokens)
    for a, b in zip(eager.trace, replayed.trace, strict=True):
        assert torch.equal(a.logits, b.logits)
    assert replayed.forward_passes == eager.forward_passes


def test_the_compiled_step_samples_the_eager_steps_tokens_in_float32():
    """inductor's step, captured (`compile`), against the eager static step on `small`. Its kernels differ
    (fusion, reduction order), so logits agree to rounding, not bitwise; in bf16 that rounding flips a
    near-tie of the Gumbel argmax now and then (seen on an H200 at batch 8), so tokens are compared
    in float32, where a flip needs a tie within ~1e-6."""
    from aogpt_plugin.sampler import SampleConfig, generate

    model = _small(torch.float32)
    runs = {}
    for graphs in ("static", "compile"):
        config = SampleConfig(length=64, num_samples=8, seed=7, graphs=graphs, steps=64)
        generate(model, config)
        runs[graphs] = generate(model, config, record=True)
    assert torch.equal(runs["compile"].tokens, runs["static"].tokens)
    for a, b in zip(runs["static"].trace, runs["compile"].trace, strict=True):
        torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=1e-4)


def test_no_host_sync_while_the_steps_replay(monkeypatch):
    """After a warm-up run, a run with new seeds replays every step without one stream sync: set-up and the
    step loop run under sync debug mode 'error' (only the final read of the samples syncs)."""
    from aogpt_plugin.sampler import SampleConfig, generate, generation

    model = tiny_model("adaln", preset="sampler").cuda()
    config = SampleConfig(length=32, steps=32, num_samples=4, seed=1, graphs="on")
    generate(model, config)
    progress_bar, finish = generation._progress_bar, generation._finish

    def strict_from_here(*args, **kwargs):  # called after the run's set-up copy, before the first step
        torch.cuda.set_sync_debug_mode("error")
        return progress_bar(*args, **kwargs)

    def lenient_finish(run):
        torch.cuda.set_sync_debug_mode("default")
        return finish(run)

    monkeypatch.setattr(generation, "_progress_bar", strict_from_here)
    monkeypatch.setattr(generation, "_finish", lenient_finish)
    try:
        config.seed = 2
        result = generate(model, config)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert result.forward_passes == 32


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
@pytest.mark.parametrize("counts", ["deterministic", "binomial"])
def test_graphs_sample_the_dynamic_samplers_tokens_on_the_sharp_fixture(backend, counts):
    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    config = dict(length=23, steps=7 if counts == "binomial" else 23, num_samples=3, counts=counts, seed=3)
    ref = generate(model, SampleConfig(graphs="off", backend=backend, **config), record=True)
    for graphs in ("on", "compile") if counts == "deterministic" else ("on",):
        got = generate(model, SampleConfig(graphs=graphs, backend=backend, **config), record=True)
        assert torch.equal(got.tokens, ref.tokens), graphs
        for a, b, rec in zip(got.trace, ref.trace, ref.trace, strict=True):
            used = torch.arange(a.logits.shape[1]) < rec.counts[:, None]
            torch.testing.assert_close(a.logits[used], b.logits[used], atol=2e-4, rtol=1e-4)


def test_flex_decoding_is_the_lowered_kernel_of_a_t_n_step():
    """At W = 1 with a static batch, inductor lowers the static step's FlexAttention to FlexDecoding (its
    split-KV template), not the prefill kernel."""
    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    config = SampleConfig(length=32, steps=32, num_samples=4, seed=1, graphs="on", backend="flex")
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False):
        _, code = run_and_get_code(generate, model, config)
    source = "\n".join(code)
    assert "SPLIT_KV" in source, "no FlexDecoding kernel in the generated code"


def test_the_compiled_split_argmax_is_argmax_in_two_reductions_on_cuda():
    """The compiled draw's argmax (sampling.split_argmax) on CUDA: argmax's index on float64 rows of the vocabulary's
    width with ties, -inf and NaN, in at most 2 reduction kernels (one program a row reduced 50k values: 61 us of
    the 2026-11-28 step at batch 32)."""
    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.sampler.sampling import split_argmax

    g = torch.Generator(device="cuda").manual_seed(0)
    values = torch.randn(32, 50304, dtype=torch.float64, device="cuda", generator=g)
    values[1, 7], values[1, 40000] = 9.0, 9.0  # a tie: the first wins
    values[2] = float("-inf")
    values[3, 123] = float("nan")
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False):
        got, code = run_and_get_code(torch.compile(split_argmax, fullgraph=True), values)
    assert torch.equal(got, values.argmax(dim=-1))
    reductions = re.findall(r"^def (triton_(?:red|per)_\w+)\(", "\n".join(code), re.M)  # inductor's reduction kernels
    assert 1 <= len(reductions) <= 2, reductions


def _flex_decoding_source(decode_attention: str) -> str:
    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    config = SampleConfig(
        length=32, steps=32, num_samples=4, seed=1, graphs="on", backend="flex", decode_attention=decode_attention
    )
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False):
        _, code = run_and_get_code(generate, model, config)
    return "\n".join(c for c in code if "SPLIT_KV" in c)


def test_the_decode_attention_setting_is_in_the_flex_decoding_kernel():
    """`--decode-attention` reaches the kernel inductor generates: SPLIT_KV, num_stages and num_warps as set, the
    partial layout without full-block lists; `full` keeps them."""
    source = _flex_decoding_source("partial,split=4,stages=2,warps=4")
    assert re.search(r"SPLIT_KV\s*:\s*tl\.constexpr\s*=\s*4\b", source), "SPLIT_KV 4 not in the kernel"
    assert re.search(r"num_stages\s*=\s*2\b", source) and re.search(r"num_warps\s*=\s*4\b", source)
    assert re.search(r"HAS_FULL_BLOCKS\s*:\s*tl\.constexpr\s*=\s*False", source)
    assert re.search(r"HAS_FULL_BLOCKS\s*:\s*tl\.constexpr\s*=\s*True", _flex_decoding_source("full"))


def test_every_decode_attention_setting_samples_the_same_tokens():
    """Layouts and kernel options change how the attention is split, not what it computes: the replayed step's
    tokens equal the default's, its logits to rounding."""
    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    runs = {}
    for setting in ("auto", "full", "partial,split=8,stages=3,warps=4"):
        config = SampleConfig(
            length=40, steps=40, num_samples=4, seed=5, graphs="on", backend="flex", decode_attention=setting
        )
        generate(model, config)  # every step shape captured
        runs[setting] = generate(model, config, record=True)
    for setting, run in runs.items():
        assert torch.equal(run.tokens, runs["auto"].tokens), setting
        for a, b in zip(run.trace, runs["auto"].trace, strict=True):
            torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)


def test_the_bench_runs_graphed_on_cuda(capsys):
    import json

    from aogpt_plugin.cli import main

    argv = ["bench", "sampler", "--flavor", "tiny", "--n", "64", "--batch", "2", "--repeats", "1", "--graphs", "on"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["graphs"] == "on" and out["ao_forward_passes"]["64"] == 64


def test_the_compiled_step_writes_the_kv_cache_in_place_on_cuda():
    """The 2026-11-27 H200 run: `--graphs compile` took 13 ms a step against 1.5 ms for `on`, AO and AR alike,
    the encoder (no cache) not: inductor's step with flex on CUDA must allocate nothing as large as one
    layer's K/V cache (a copy of it per step would explain the gap; tests/sampler/test_static.py checks the
    CPU's step the same way)."""
    from conftest import cache_sized_allocations
    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.sampler import SampleConfig, generate
    from aogpt_plugin.sampler.choices import DEFAULT_DECODE_ATTENTION
    from aogpt_plugin.sampler.static import static_decoder

    model = tiny_model("adaln", preset="sampler").cuda()
    torch._dynamo.reset()
    config = SampleConfig(length=32, steps=32, num_samples=4, seed=1, graphs="compile", backend="flex")
    with torch._inductor.config.patch(fx_graph_cache=False):
        _, code = run_and_get_code(generate, model, config)
    state = static_decoder(model, 4, "flex", "auto", "compile", DEFAULT_DECODE_ATTENTION)
    source = "\n".join(code)
    assert "empty_strided" in source
    assert cache_sized_allocations(source, state.decoder.cache.k[0].numel()) == []


def test_row_i_of_a_mixed_batch_replayed_from_graphs_is_its_batch_of_one():
    """Prompts, infill spans, lengths, orders and seeds that differ per row are data in the captured step's
    buffers: row i of the replayed mixed batch is request i sampled alone (tokens equal on the sharp fixture,
    its given tokens kept, logits to GEMM rounding), with T = n and with binomial counts (known per row)."""
    from aogpt_plugin.sampler import Prompt, SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    mix = [  # (given tokens, length, seed, order)
        (Prompt((0, 1, 2), (5, 6, 7)), 20, 11, "random"),
        (Prompt(), 23, 5, "l2r"),
        (Prompt((2, 3, 10), (9, 8, 7)), 16, 7, "random"),
        (Prompt((0,), (4,)), 12, 2, "random"),
    ]
    prompts, lengths, seeds, orders = zip(*mix, strict=True)
    for case in (dict(steps=None), dict(steps=5, counts="binomial")):
        config = SampleConfig(length=23, num_samples=4, lengths=lengths, seeds=seeds, graphs="on", **case)
        mixed = generate(model, config, prompts, order=list(orders), record=True)
        for b, (prompt, length, seed, order) in enumerate(mix):
            alone_config = SampleConfig(length=length, num_samples=1, seed=seed, graphs="on", **case)
            alone = generate(model, alone_config, prompt, order=[order], record=True)
            assert mixed.sample_tokens(b) == alone.sample_tokens(0), (case, b)
            assert all(mixed.tokens[b, p] == t for p, t in zip(prompt.positions, prompt.tokens, strict=True))
            got = [r.logits[b, : int(r.counts[b])] for r in mixed.trace if int(r.counts[b]) > 0]
            ref = [r.logits[0, : int(r.counts[0])] for r in alone.trace if int(r.counts[0]) > 0]
            assert len(got) == len(ref)
            for g, r in zip(got, ref, strict=True):
                torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)
