"""The cached sampler against full recomputation with the training forward (no cache, no masks)."""

from __future__ import annotations

import pytest
import torch
from conftest import gpt2_logits, needs_onednn, tiny_gpt2

from aogpt_plugin.bench.baselines import ar_generate
from aogpt_plugin.sampler import Prompt, SampleConfig, SamplingParams, generate
from aogpt_plugin.sampler.generation import noise_seed
from aogpt_plugin.sampler.noise import PARALLEL_DRAW, row_keys
from aogpt_plugin.sampler.sampling import sample_tokens
from aogpt_plugin.seeding import sample_seed


def recomputed_logits(model, result) -> list[torch.Tensor]:
    """Per recorded step, the logits the training forward gives for each new target: slot u reads the
    u known tokens and is conditioned on the duplicate's target (order with positions u, u+k swapped)."""
    out = []
    for rec in result.trace:
        orders, tokens, where = [], [], []
        for b in range(result.tokens.shape[0]):
            u = int(rec.known[b])
            for k in range(int(rec.counts[b])):
                order = result.orders[b].clone()
                order[u], order[u + k] = order[u + k].clone(), order[u].clone()
                orders.append(order)
                tokens.append(result.tokens[b])
                where.append((b, k, u))
        full = model(torch.stack(tokens), torch.stack(orders))
        ref = torch.full_like(rec.logits, float("nan"))
        for i, (b, k, u) in enumerate(where):
            ref[b, k] = full[i, u]
        out.append(ref)
    return out


def assert_cache_exact(model, result):
    assert result.trace, "nothing recorded"
    for rec, ref in zip(result.trace, recomputed_logits(model, result), strict=True):
        used = ~ref.isnan()
        torch.testing.assert_close(rec.logits[used], ref[used], atol=2e-4, rtol=1e-4)
        assert used.any(dim=-1).sum() == rec.counts.sum()


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
@pytest.mark.parametrize(
    "steps,counts,schedule",
    [
        (23, "deterministic", "linear"),
        (7, "deterministic", "cosine"),
        (5, "binomial", "linear"),
        (11, "binomial", "cosine"),
    ],
)
def test_cached_logits_equal_full_recomputation(ao_model, backend, steps, counts, schedule):
    config = SampleConfig(
        length=23, steps=steps, num_samples=3, counts=counts, schedule=schedule, seed=3, backend=backend
    )
    result = generate(ao_model, config, record=True)
    if counts == "binomial":  # the batch really is ragged: samples unmask different numbers in some step
        per_step = torch.stack([r.counts for r in result.trace])
        assert (per_step != per_step[:, :1]).any()
    assert_cache_exact(ao_model, result)


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_cached_logits_exact_with_scattered_prompt(ao_model, backend):
    prompt = Prompt(positions=(0, 1, 9, 17, 18), tokens=(5, 6, 7, 8, 9))
    config = SampleConfig(length=19, steps=4, num_samples=2, counts="binomial", seed=1, backend=backend)
    result = generate(ao_model, config, prompt, record=True)
    assert_cache_exact(ao_model, result)


@pytest.mark.parametrize("conditioning_model", ["ao_model", "gpt_model"])
def test_l2r_full_steps_is_greedy_ar_decoding(conditioning_model, request):
    model = request.getfixturevalue(conditioning_model)
    n, greedy = 20, SamplingParams(top_k=1)
    result = generate(model, SampleConfig(length=n, steps=n, num_samples=2, order="l2r", sampling=greedy, seed=4))
    tokens = torch.zeros(2, n, dtype=torch.long)
    for j in range(n):  # naive greedy decoding: a full causal forward per token
        tokens[:, j] = model(tokens)[:, j, : model.model_args.vocab_size].argmax(-1)
    assert torch.equal(result.tokens, tokens)
    ar = ar_generate(model, n, batch=2, sampling=greedy)
    assert torch.equal(ar.tokens, tokens)
    assert result.forward_passes == ar.forward_passes == n


def test_l2r_full_steps_matches_sampled_ar_decoding(gpt_model):
    n, seed = 16, 9
    result = generate(gpt_model, SampleConfig(length=n, steps=n, num_samples=3, order="l2r", seed=seed))
    ar = ar_generate(gpt_model, n, batch=3, seed=seed)
    assert torch.equal(result.tokens, ar.tokens)


def test_random_order_full_steps_is_teacher_forced_ao_sampling(ao_model):
    n, seed, batch = 18, 5, 3
    result = generate(ao_model, SampleConfig(length=n, steps=n, num_samples=batch, seed=seed))
    order = result.orders
    assert not torch.equal(order[0], order[1])  # per-sample random orders
    noise_keys = torch.tensor([noise_seed(sample_seed(seed, b)) for b in range(batch)])  # sample b's seed
    tokens = torch.zeros(batch, n, dtype=torch.long)
    rows = torch.arange(batch)
    for j in range(n):
        logits = ao_model(tokens, order)[:, j : j + 1]
        keys = row_keys(noise_keys, PARALLEL_DRAW, order[:, j : j + 1])  # each draw keyed by its position
        tokens[rows, order[:, j]] = sample_tokens(logits, ao_model.model_args.vocab_size, SamplingParams(), keys)[:, 0]
    assert torch.equal(result.tokens, tokens)


def test_user_given_order_is_followed(ao_model):
    n = 12
    order = torch.tensor([[5, 3, 11, 0, 1, 2, 4, 6, 7, 8, 9, 10], list(range(11, -1, -1))])
    result = generate(ao_model, SampleConfig(length=n, steps=n, num_samples=2), order=order, record=True)
    assert torch.equal(result.orders, order)
    assert_cache_exact(ao_model, result)


def test_same_seed_same_samples_different_seed_different(ao_model):
    def run(seed):
        return generate(ao_model, SampleConfig(length=24, steps=6, num_samples=2, counts="binomial", seed=seed)).tokens

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_binomial_empty_steps_run_no_forward(ao_model):
    config = SampleConfig(length=6, steps=6, num_samples=1, counts="binomial", seed=0)
    for seed in range(20):
        config.seed = seed
        result = generate(ao_model, config, record=True)
        nonempty = sum(int(r.counts.sum() > 0) for r in result.trace)
        assert result.forward_passes == len(result.trace) == nonempty
        if result.forward_passes < config.steps:
            return
    pytest.fail("no seed produced an empty step")


def test_samples_are_in_vocab_and_complete(ao_model):
    result = generate(ao_model, SampleConfig(length=40, steps=3, num_samples=4, seed=2))
    assert result.tokens.shape == (4, 40)
    assert (result.tokens >= 0).all() and (result.tokens < ao_model.model_args.vocab_size).all()
    assert torch.equal(result.orders.sort(dim=1).values, torch.arange(40).expand(4, 40))
    assert result.forward_passes == 3 and result.generated_tokens == 160


def test_the_progress_bar_ends_at_its_total(capsys, ao_model):
    generate(ao_model, SampleConfig(length=12, steps=12, seed=0), progress=True)
    assert "12/12" in capsys.readouterr().err


@pytest.mark.parametrize(
    "graphs, linears",
    [("off", "aten"), pytest.param("off", "onednn", marks=needs_onednn), ("static", "auto")],
)
def test_a_gpt2_read_left_to_right_records_transformers_logits(tmp_path, graphs, linears):
    """A converted GPT-2 sampled left to right, one token per step: every step's cached logits are
    transformers' for the tokens drawn so far after <|endoftext|>, through the decode view (packed
    Linears and the tied head packed from the embedding on CPU) and the static step."""
    pytest.importorskip("transformers")
    from aogpt_plugin.convert import convert_from_hf
    from aogpt_plugin.model_dir import load_model_dir

    gpt2 = tiny_gpt2(tmp_path / "hf")
    convert_from_hf(str(tmp_path / "hf"), str(tmp_path / "ao"))
    model = load_model_dir(str(tmp_path / "ao")).model
    n = 16
    config = SampleConfig(length=n, steps=n, num_samples=2, order="l2r", seed=5, graphs=graphs, linears=linears)
    result = generate(model, config, record=True)
    theirs = gpt2_logits(gpt2, result.tokens)
    assert len(result.trace) == n and len(set(result.tokens[0].tolist())) > 1
    for j, rec in enumerate(result.trace):
        torch.testing.assert_close(rec.logits[:, 0, :50257], theirs[:, j], atol=1e-5, rtol=0)
