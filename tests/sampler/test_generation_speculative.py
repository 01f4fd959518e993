"""Any-order speculative sampling: exactly the sequential distribution (enumerated on a toy model), never
more forwards than tokens, a cache that always equals a recomputation, and seeded like the sampler."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import tiny_model
from scipy import stats

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler import Prompt, SampleConfig, SamplingParams, generate
from aogpt_plugin.sampler.generation import speculative_generate
from aogpt_plugin.sampler.sampling import filtered_scores
from aogpt_plugin.sampler.speculative import auto_draft_size, parse_draft

N, VOCAB = 4, 6
ORDER = torch.tensor([2, 0, 3, 1])  # a fixed generation order


@pytest.fixture(scope="module")
def toy():
    """6 real tokens, 4 positions, sharp distributions: the joint can be enumerated (6^4 sequences)."""
    return tiny_model("adaln", vocab_size=VOCAB, max_seq_len=N, scale=6.0, seed=5, preset="sampler")


def exact_joint(model, sampling: SamplingParams) -> torch.Tensor:
    """p(x) = prod_j q(x_sigma(j) | x_sigma(<j)) over all 6^4 sequences, each conditional processed."""
    seqs = torch.tensor(list(itertools.product(range(VOCAB), repeat=N)))
    order = ORDER.expand(len(seqs), N)
    with torch.no_grad():
        scores = filtered_scores(model(seqs, order), VOCAB, sampling)
    logp = scores.log_softmax(-1).gather(-1, seqs.gather(1, order).unsqueeze(-1)).squeeze(-1)
    return logp.sum(1).exp()


def chi_square_p(samples: torch.Tensor, joint: torch.Tensor) -> float:
    """p-value of the samples' counts against the joint, cells with expected count < 5 pooled; 0 if a
    sequence of probability 0 (cut by top-p) was drawn."""
    index = (samples * torch.tensor([VOCAB**3, VOCAB**2, VOCAB, 1])).sum(1)
    counts = torch.bincount(index, minlength=VOCAB**N).double()
    expected = joint.double() * len(samples)
    if bool((counts[joint == 0] > 0).any()):
        return 0.0
    counts, expected = counts[joint > 0], expected[joint > 0]
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum().unsqueeze(0)])
    exp = torch.cat([expected[~small], expected[small].sum().unsqueeze(0)])
    if not bool(small.any()):
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue)


def draw(model, sampling, total, speculative=None, steps=N, seed=0):
    """`total` samples in batches of 25,000, sample i seeded seed * total + i (batch b starts where b - 1 ended)."""
    out = []
    for b in range(total // 25_000):
        config = SampleConfig(
            length=N, steps=steps, num_samples=25_000, sampling=sampling, seed=seed * total + b * 25_000
        )
        if speculative is None:
            out.append(generate(model, config, order=ORDER).tokens)
        else:
            out.append(speculative_generate(model, config, draft=speculative, order=ORDER)[0].tokens)
    return torch.cat(out)


SAMPLINGS = [SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9)]


@pytest.mark.parametrize(
    ("sampling", "draft"),
    [
        pytest.param(SAMPLINGS[1], "auto", id="auto-t0.7-p0.9"),  # by default; the others in make test-slow
        pytest.param(SAMPLINGS[0], "auto", id="auto-t1", marks=pytest.mark.slow),
        pytest.param(SAMPLINGS[0], 3, id="3-t1", marks=pytest.mark.slow),
        pytest.param(SAMPLINGS[1], 3, id="3-t0.7-p0.9", marks=pytest.mark.slow),
    ],
)
def test_speculative_samples_follow_the_sequential_joint(toy, sampling, draft):
    joint = exact_joint(toy, sampling)
    assert abs(float(joint.sum()) - 1.0) < 1e-9
    samples = draw(toy, sampling, 100_000, speculative=draft)
    assert chi_square_p(samples, joint) > 1e-3


def test_the_check_fails_for_parallel_sampling_so_it_can_fail(toy):
    """T = n/2 draws pairs of positions from independent marginals: not the sequential joint."""
    samples = draw(toy, SAMPLINGS[0], 100_000, steps=N // 2)
    assert chi_square_p(samples, exact_joint(toy, SAMPLINGS[0])) < 1e-6


# Where the noise's keys once collided: speculative rounds draw at steps 1 + 3 x round + purpose, and with the
# step and the position folded alike and added, (step a, position p) and (step p, position a) shared one noise
# vector. At n = 6 that is most of a sample's draws (a fifth of the samples drew two tokens with one vector),
# and a vocabulary of 3 makes the law of x enumerable (729 sequences) and the damage visible.
N6, V3, ORDERS6, SAMPLES6 = 6, 3, 60, 100_020


@pytest.fixture(scope="module")
def toy6():
    return tiny_model("adaln", vocab_size=V3, max_seq_len=N6, scale=4.0, seed=3, preset="sampler")


@pytest.fixture(scope="module")
def orders6():
    """60 orders (seeded draws), sample b filling order b mod 60: the law of x is their exact mixture."""
    perms = torch.stack([torch.randperm(N6, generator=torch.Generator().manual_seed(k)) for k in range(ORDERS6)])
    return perms, perms.repeat(SAMPLES6 // ORDERS6, 1)


@pytest.fixture(scope="module")
def law6(toy6, orders6):
    """p(x) = mean over the 60 orders of prod_j q(x_sigma(j) | x_sigma(<j)), all 3^6 sequences."""
    perms = orders6[0]
    seqs = torch.tensor(list(itertools.product(range(V3), repeat=N6)))
    x, order = seqs.repeat(ORDERS6, 1), perms.repeat_interleave(len(seqs), 0)
    with torch.inference_mode():
        scores = filtered_scores(toy6(x, order), V3, SamplingParams())
    logp = scores.double().log_softmax(-1).gather(-1, x.gather(1, order).unsqueeze(-1)).squeeze(-1).sum(1)
    return logp.exp().view(ORDERS6, -1).mean(0)


def commuting_row_keys(seeds, step, positions):
    """The keys before the fix (the negative control): step and position folded alike and added."""
    from aogpt_plugin.sampler.noise import _STREAM_2, MASK32, fold32, pcg_hash

    offsets = torch.arange(2) * _STREAM_2
    step = torch.as_tensor(step, dtype=torch.long)
    step = step.view(-1, 1, 1) if step.dim() else step
    key = fold32(positions.unsqueeze(-1), offsets)
    key = pcg_hash((fold32(step, offsets) + key) & MASK32)
    return pcg_hash((fold32(seeds.view(-1, 1, 1), offsets) + key) & MASK32)


def law_p(samples: torch.Tensor, law: torch.Tensor) -> float:
    """Chi-square p-value of the samples' sequences against the law (729 cells, every expected count >= 5 here)."""
    index = (samples * torch.tensor([V3 ** (N6 - 1 - k) for k in range(N6)])).sum(1)
    counts = torch.bincount(index, minlength=V3**N6).double()
    expected = law * len(samples)
    assert float(expected.min()) >= 5
    return float(stats.chisquare(counts.numpy(), (expected * counts.sum() / expected.sum()).numpy()).pvalue)


def draw6(model, orders, draft=None, seed=2026):
    config = SampleConfig(length=N6, steps=N6, num_samples=SAMPLES6, seed=seed)
    if draft is None:
        return generate(model, config, order=orders).tokens
    return speculative_generate(model, config, draft=draft, order=orders)[0].tokens


@pytest.mark.slow  # two runs of 100k samples, 1-4 minutes; the keys themselves: tests/sampler/test_noise.py
def test_speculative_sampling_is_exact_where_the_old_keys_collided_and_the_old_keys_fail(
    toy6, orders6, law6, monkeypatch
):
    """Draft 3 (every draft size and auto: the slow test below) follows the law of x; the same run with the
    keys before the fix does not (p was 1e-116 on this model), so the test can fail where the bug was."""
    assert law_p(draw6(toy6, orders6[1], 3), law6) > 1e-3
    monkeypatch.setattr("aogpt_plugin.sampler.generation.row_keys", commuting_row_keys)
    assert law_p(draw6(toy6, orders6[1], 3), law6) < 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("draft", [None, 1, 2, 4, 5, 6, "auto"])
def test_every_draft_size_and_the_plain_sampler_follow_the_law_where_keys_once_collided(toy6, orders6, law6, draft):
    """The positive control (None: the T = n sampler, which draws each position once) and every draft size."""
    assert law_p(draw6(toy6, orders6[1], draft), law6) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("draft", [2, 4, 6, "auto"])
def test_the_old_keys_fail_the_law_at_every_draft_size(toy6, orders6, law6, draft, monkeypatch):
    monkeypatch.setattr("aogpt_plugin.sampler.generation.row_keys", commuting_row_keys)
    assert law_p(draw6(toy6, orders6[1], draft), law6) < 1e-9


@pytest.mark.parametrize("draft", [1, 2, 3, 5, 8, "auto"])
@pytest.mark.parametrize("batch", [1, 4])
def test_never_more_forwards_than_tokens_and_every_token_counted(ao_model, draft, batch):
    config = SampleConfig(length=23, steps=23, num_samples=batch, seed=2)
    result, st = speculative_generate(ao_model, config, draft=draft)
    per_sample = [sum(column) for column in zip(*st.tokens_per_forward, strict=True)]
    assert per_sample == [23] * batch  # the rounds account for every token of every sample
    assert result.forward_passes <= 23  # shared by the batch: at most one forward per token of a sample
    # a forward fixes its verified drafts plus, at the very end, the one exact draft it drew
    assert all(0 <= t <= (draft if draft != "auto" else 16) + 1 for row in st.tokens_per_forward for t in row)
    if draft == 1:
        assert result.forward_passes == 23 and st.drafts_checked == 0  # k = 1 is plain sequential sampling


def test_same_seed_same_samples_and_prompts_are_kept(ao_model):
    prompt = Prompt((0, 5, 6), (7, 8, 9))
    config = SampleConfig(length=20, steps=17, num_samples=3, seed=4)
    a, _ = speculative_generate(ao_model, config, draft=3, prompt=prompt)
    b, _ = speculative_generate(ao_model, config, draft=3, prompt=prompt)
    assert torch.equal(a.tokens, b.tokens)
    assert (a.tokens[:, [0, 5, 6]] == torch.tensor([7, 8, 9])).all()
    c, _ = speculative_generate(
        ao_model, SampleConfig(length=20, steps=17, num_samples=3, seed=5), draft=3, prompt=prompt
    )
    assert not torch.equal(a.tokens, c.tokens)


def recomputed_kv(model, tokens, order, slots):
    """Per layer, K and V of slots 0..slots-1 from the training forward (no cache)."""
    captured = []

    def attend(q, k, v):
        captured.append((k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    with torch.no_grad():
        bsz = tokens.shape[0]
        read = torch.gather(tokens, 1, order[:, : slots - 1])
        x = torch.cat([model.start_embedding().expand(bsz, 1, -1), model.embed_tokens(read, order[:, : slots - 1])], 1)
        x = x + model.input_shift(order[:, :slots])
        cond = model.condition(order[:, :slots])
        for layer in model.layers.values():
            x = layer(x, cond, attend=attend)
    return captured


def test_after_every_round_the_cache_equals_a_recomputation_of_the_accepted_prefix(ao_model):
    checked = []

    def inspect(decoder, known, cache_len, in_order, orders):
        for b in range(known.shape[0]):
            c = int(cache_len[b])
            if c < 2:
                continue
            tokens = torch.zeros(1, orders.shape[1], dtype=torch.long)
            tokens[0, orders[b, : int(known[b])]] = in_order[b, : int(known[b])]
            ref = recomputed_kv(ao_model, tokens, orders[b : b + 1], c)
            for layer, (k, v) in enumerate(ref):
                torch.testing.assert_close(decoder.cache.k[layer][b, :, :c], k[0], atol=2e-4, rtol=1e-4)
                torch.testing.assert_close(decoder.cache.v[layer][b, :, :c], v[0], atol=2e-4, rtol=1e-4)
            checked.append(c)

    config = SampleConfig(length=23, steps=23, num_samples=3, seed=6)
    _, st = speculative_generate(ao_model, config, draft=4, inspect=inspect)
    assert len(checked) > 10 and st.drafts_checked > st.drafts_accepted > 0  # rejections happened


def test_draft_sizes_and_their_errors():
    assert parse_draft("auto") == "auto" and parse_draft("4") == 4
    for bad in ("0", "17", "many"):
        with pytest.raises(UserError, match="allowed: a draft size 1..16 or auto"):
            parse_draft(bad)
    assert auto_draft_size(0.5) == 2 and auto_draft_size(0.9) == 10 and auto_draft_size(1.0) == 16


@pytest.mark.parametrize("graphs", ["static", "on"])
@pytest.mark.parametrize("draft", [3, "auto"])
def test_the_static_forward_drafts_and_verifies_what_the_dynamic_one_does(ao_model, graphs, draft):
    """Same tokens and the same rounds (forwards, drafts checked and accepted) with graphs on and off."""
    config = dict(length=20, steps=17, num_samples=3, seed=4)
    for prompt in (None, Prompt((0, 5, 6), (7, 8, 9))):
        ref, ref_stats = speculative_generate(ao_model, SampleConfig(graphs="off", **config), draft, prompt)
        got, got_stats = speculative_generate(ao_model, SampleConfig(graphs=graphs, **config), draft, prompt)
        assert torch.equal(got.tokens, ref.tokens)
        assert got_stats == ref_stats and got.forward_passes == ref.forward_passes
