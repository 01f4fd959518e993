"""A sample's tokens depend on its own request and seed only: row i of a batch that mixes prompts, infill
spans, lengths, orders and seeds equals a batch of one with the same request and seed, in the dynamic
sampler, the static step (eager and inductor-compiled) and speculative sampling; its given tokens are
kept; its logits agree with the lone run's to rounding."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler import Prompt, SampleConfig, SamplingParams, generate
from aogpt_plugin.sampler.generation import speculative_generate
from aogpt_plugin.seeding import sample_seed

N = 23
# one request per row: (given tokens, length, seed, order)
MIX = [
    (Prompt((0, 1, 2), (5, 6, 7)), 20, 11, "random"),
    (Prompt(), N, 5, "l2r"),
    (Prompt((2, 3, 10), (9, 8, 7)), 16, 7, "random"),
    (Prompt((0,), (4,)), 12, 2, torch.tensor([11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6])),
]
CASES = {
    "T=n": dict(steps=None),
    "T=4": dict(steps=4),
    "binomial-T=5": dict(steps=5, counts="binomial"),
    "filtered": dict(steps=None, sampling=SamplingParams(temperature=0.8, top_p=0.9, top_k=20)),
}


def _mixed(rows=MIX, **options):
    prompts, lengths, seeds, orders = zip(*rows, strict=True)
    config = SampleConfig(length=max(lengths), num_samples=len(rows), lengths=lengths, seeds=seeds, **options)
    return config, prompts, list(orders)


def _alone(row, **options):
    prompt, length, seed, order = row
    return SampleConfig(length=length, num_samples=1, seed=seed, **options), prompt, [order]


def _row_logits(result, b: int) -> list[torch.Tensor]:
    """Row b's logits at each forward it drew in: (its count, padded vocab)."""
    return [rec.logits[b, : int(rec.counts[b])] for rec in result.trace if int(rec.counts[b]) > 0]


def assert_row_is_the_lone_run(mixed, alone, b: int) -> None:
    assert mixed.sample_tokens(b) == alone.sample_tokens(0)
    got, ref = _row_logits(mixed, b), _row_logits(alone, 0)
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


SLOW = pytest.mark.slow  # compiles its own step shapes (a minute with a cold inductor cache)
PATHS = [
    (graphs, case, ()) if graphs != "on" or case == "T=n" else (graphs, case, SLOW)
    for graphs in ("off", "static", "on")
    for case in CASES
]


@pytest.mark.parametrize("graphs, case", [pytest.param(g, c, marks=m, id=f"{g}-{c}") for g, c, m in PATHS])
def test_row_i_of_a_mixed_batch_is_its_batch_of_one(ao_model, case, graphs):
    """`on` is the inductor-compiled static step on a CPU."""
    options = dict(CASES[case], graphs=graphs, backend="sdpa")
    config, prompts, orders = _mixed(**options)
    mixed = generate(ao_model, config, prompts, order=orders, record=True)
    for b, row in enumerate(MIX):
        config_b, prompt_b, order_b = _alone(row, **options)
        alone = generate(ao_model, config_b, prompt_b, order=order_b, record=True)
        assert_row_is_the_lone_run(mixed, alone, b)
        prompt, length = row[0], row[1]
        assert all(mixed.tokens[b, p] == t for p, t in zip(prompt.positions, prompt.tokens, strict=True))
        assert (mixed.tokens[b, length:] == -1).all() and (mixed.tokens[b, :length] >= 0).all()
    assert mixed.generated_tokens == sum(length - len(prompt) for prompt, length, _, _ in MIX)


def test_graphs_modes_sample_the_same_mixed_batch(ao_model):
    config, prompts, orders = _mixed(steps=5, counts="binomial")
    runs = {}
    for graphs in ("off", "static", "on"):
        config.graphs = graphs
        runs[graphs] = generate(ao_model, config, prompts, order=orders)
    assert torch.equal(runs["static"].tokens, runs["off"].tokens)
    assert torch.equal(runs["on"].tokens, runs["off"].tokens)


def test_a_sample_is_the_same_at_any_batch_size_and_position(ao_model):
    """Sample i of a batch seeded s is seeded sample_seed(s, i): sample 2 of a batch of 4 seeded 10 is the
    sample of that seed alone, and the first of a batch seeded with it; sample 0 is the batch of one seeded s."""
    run = lambda batch, seed: generate(ao_model, SampleConfig(length=N, steps=6, num_samples=batch, seed=seed))
    four = run(4, 10)
    two = sample_seed(10, 2)
    assert four.tokens[2].tolist() == run(1, two).tokens[0].tolist() == run(3, two).tokens[0].tolist()
    assert four.tokens[0].tolist() == run(1, 10).tokens[0].tolist()
    assert four.tokens[1].tolist() != four.tokens[2].tolist()  # neighbours differ


def test_batches_of_neighbouring_seeds_share_no_sample(ao_model):
    """The habit of stepping the seed by one per call: the batches seeded 10 and 11 have no sample in common
    (seeds s + i would have given them all but one), nor any sample seeds."""
    run = lambda seed: generate(ao_model, SampleConfig(length=N, steps=6, num_samples=8, seed=seed)).tokens
    a, b = run(10), run(11)
    assert not {tuple(r) for r in a.tolist()} & {tuple(r) for r in b.tolist()}
    seeds = {s: SampleConfig(length=N, num_samples=500, seed=s).sample_seeds() for s in range(20)}
    assert len({x for v in seeds.values() for x in v}) == 20 * 500


@pytest.mark.parametrize("draft", [3, "auto"])
@pytest.mark.parametrize("graphs", ["off", "static"])
def test_speculative_row_i_of_a_mixed_batch_is_its_batch_of_one(ao_model, draft, graphs):
    """Each sample's rounds, its draws (keyed by its own round) and, with `auto`, its draft size are its own."""
    config, prompts, orders = _mixed(graphs=graphs)
    mixed, stats = speculative_generate(ao_model, config, draft, prompts, order=orders)
    assert stats.drafts_checked > stats.drafts_accepted > 0  # rejections happened
    for b, row in enumerate(MIX):
        config_b, prompt_b, order_b = _alone(row, graphs=graphs)
        alone, _ = speculative_generate(ao_model, config_b, draft, prompt_b, order=order_b)
        assert mixed.sample_tokens(b) == alone.sample_tokens(0), b


def test_the_check_can_fail_a_neighbour_with_a_shared_stream_would_be_caught(ao_model):
    """The comparison above sees a changed seed: the same request seeded otherwise gives other tokens."""
    config, prompts, orders = _mixed(steps=4)
    mixed = generate(ao_model, config, prompts, order=orders)
    config_b, prompt_b, order_b = _alone((*MIX[0][:2], MIX[0][2] + 1, MIX[0][3]), steps=4)
    assert mixed.sample_tokens(0) != generate(ao_model, config_b, prompt_b, order=order_b).sample_tokens(0)


def test_per_sample_values_are_checked_naming_the_sample(ao_model):
    config, prompts, orders = _mixed(steps=9)  # sample 3 has 11 positions to generate, sample 2 has 13: fine
    config.steps = 12
    with pytest.raises(UserError, match=r"steps=12 is outside the allowed range 1..11 .*\(sample 3\)"):
        generate(ao_model, config, prompts, order=orders)
    config, prompts, orders = _mixed()
    config.lengths = (20, 23, 16, 24)
    with pytest.raises(UserError, match=r"length=24 of sample 3 is outside 1..23"):
        generate(ao_model, config, prompts, order=orders)
    config, prompts, _ = _mixed()
    bad_order = [None, None, None, torch.tensor([1, 2, 3])]
    with pytest.raises(UserError, match=r"order has shape \(3,\) \(sample 3\); allowed: \(11,\)"):
        generate(ao_model, config, prompts, order=["random", "l2r", "random", bad_order[3]])
