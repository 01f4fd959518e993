"""Float64 Gumbel-max draws, temperature, top-k and top-p; time grids and per-step token counts,
including Lemma 4.1's binomial law."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler.noise import PARALLEL_DRAW, NoiseWorkspace, row_keys
from aogpt_plugin.sampler.sampling import (
    RowFilters,
    SamplingParams,
    binomial_counts,
    deterministic_counts,
    filtered_scores,
    gumbel_argmax,
    row_filtered_scores,
    row_parameters,
    sample_row_tokens,
    sample_tokens,
    split_argmax,
    step_counts,
    time_grid,
    top_p_keep,
)


def keys(rows: int, seed: int = 0) -> torch.Tensor:
    """Noise keys (rows, 2) of `rows` independent draws: samples seed*rows .. seed*rows+rows-1 at position 0."""
    return row_keys(torch.arange(rows) + seed * rows, PARALLEL_DRAW, torch.zeros(rows, 1, dtype=torch.long))[:, 0]


def chi_square_p(draws: torch.Tensor, probs: torch.Tensor) -> float:
    obs = torch.bincount(draws, minlength=probs.numel()).double()
    exp = probs.double() * draws.numel()
    keep = exp > 0
    assert obs[~keep].sum() == 0  # never a token of probability 0
    obs, exp = obs[keep], exp[keep] * draws.numel() / exp[keep].sum()
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, df=obs.numel() - 1))


def test_gumbel_argmax_matches_categorical():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, float("-inf")], dtype=torch.float64)
    draws = gumbel_argmax(logits.expand(60000, -1), keys(60000))
    assert chi_square_p(draws, logits.softmax(-1)) > 1e-3


def test_gumbel_argmax_rejects_wrong_distribution():  # the test above can fail
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0], dtype=torch.float64)
    draws = gumbel_argmax(logits.expand(60000, -1), keys(60000))
    assert chi_square_p(draws, (logits * 1.1).softmax(-1)) < 1e-3


@pytest.mark.parametrize("size", [1, 5, 64, 65, 1000, 50257])
def test_split_argmax_is_the_first_maximal_index_as_argmax_gives(size):
    """Many ties (values from a few integers), rows of -inf but one entry or all, a NaN, sizes below,
    at and past the parts: every row's index is argmax's (the first maximum, NaN maximal)."""
    g = torch.Generator().manual_seed(size)
    values = torch.randint(0, 4, (12, size), generator=g).double()
    values[1] = float("-inf")
    values[2] = float("-inf")
    values[2, size // 2] = 1.0
    values[3, size - 1] = 9.0  # the last entry, in the padded slice
    values[4, size // 3] = float("nan")
    values[5, size // 3 :] = 3.0
    for parts in (1, 7, 64):
        assert torch.equal(split_argmax(values, parts), values.argmax(dim=-1)), parts
    assert torch.equal(split_argmax(values[0]), values[0].argmax())  # one row, no batch dimension
    torch._dynamo.reset()
    assert torch.equal(torch.compile(split_argmax, fullgraph=True)(values), values.argmax(dim=-1))


def test_split_argmax_differs_from_a_last_maximum_rule():  # the test above can fail
    values = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0]], dtype=torch.float64)
    last = values.shape[-1] - 1 - values.flip(-1).argmax(dim=-1)
    assert split_argmax(values, parts=2).item() == 1 and last.item() == 4


def test_the_compiled_draw_is_the_eager_draw():
    """The static step compiles `gumbel_argmax`, which then takes its argmax in two reductions: the
    same tokens as eager on every row (near-ties included: scores from a few levels)."""
    g = torch.Generator().manual_seed(11)
    scores = torch.randint(0, 3, (64, 1000), generator=g).double() * 0.5
    scores[:, 900:] = float("-inf")
    torch._dynamo.reset()
    compiled = torch.compile(gumbel_argmax, fullgraph=True)
    assert torch.equal(compiled(scores, keys(64)), gumbel_argmax(scores, keys(64)))


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 0.0, -1.0, 0.5]])
    draws = sample_tokens(logits.expand(60000, -1), 4, SamplingParams(temperature=0.5), keys(60000, seed=1))
    assert chi_square_p(draws, (logits[0] / 0.5).softmax(-1)) > 1e-3


def test_padded_vocab_never_sampled():
    logits = torch.zeros(1000, 64)
    logits[:, 61:] = 100.0  # padding rows of the head
    draws = sample_tokens(logits, 61, SamplingParams(), keys(1000))
    assert draws.max() < 61


def test_top_p_keeps_exactly_the_nucleus():
    probs = torch.tensor([0.05, 0.4, 0.3, 0.15, 0.1], dtype=torch.float64)
    scores = probs.log()
    assert top_p_keep(scores, 0.39).tolist() == [False, True, False, False, False]
    assert top_p_keep(scores, 0.41).tolist() == [False, True, True, False, False]
    assert top_p_keep(scores, 0.69).tolist() == [False, True, True, False, False]
    assert top_p_keep(scores, 0.71).tolist() == [False, True, True, True, False]
    assert top_p_keep(scores, 0.96).tolist() == [True, True, True, True, True]
    assert top_p_keep(scores, 1e-9).tolist() == [False, True, False, False, False]  # top token always kept
    draws = sample_tokens(scores.expand(30000, -1), 5, SamplingParams(top_p=0.71), keys(30000, seed=2))
    nucleus = torch.tensor([0.0, 0.4, 0.3, 0.15, 0.0], dtype=torch.float64)
    assert chi_square_p(draws, nucleus / nucleus.sum()) > 1e-3


def test_top_p_one_keeps_the_tail():
    scores = torch.tensor([50.0, 0.0, 0.0, -10.0], dtype=torch.float64)  # tail mass ~1e-22: below cumsum rounding
    assert torch.isfinite(filtered_scores(scores, 4, SamplingParams(top_p=1.0))).all()
    assert top_p_keep(scores, 1.0).sum() < 4  # what a naive nucleus at p=1 would drop


def test_top_k():
    logits = torch.tensor([[0.1, 3.0, 2.0, -1.0, 2.5]])
    kept = torch.isfinite(filtered_scores(logits, 5, SamplingParams(top_k=2)))
    assert kept.tolist() == [[False, True, False, False, True]]
    draws = sample_tokens(logits.expand(2000, -1), 5, SamplingParams(top_k=1), keys(2000))
    assert (draws == 1).all()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=-1.0),
        SamplingParams(top_p=0.0),
        SamplingParams(top_p=1.5),
        SamplingParams(top_k=0),
    ],
)
def test_bad_params_rejected(params):
    with pytest.raises(UserError):
        params.validate()


def test_a_workspace_and_drawn_rows_give_the_same_draws_and_leave_inputs_alone():
    """The eager paths (a reused NoiseWorkspace; only the rows drawn, in chunks) give each row the token the
    plain draw gives it; the logits and scores are not written."""
    logits = torch.randn(3, 40, 70, dtype=torch.float64)
    kept = logits.clone()
    row_keys_ = row_keys(torch.tensor([4, 5, 6]), PARALLEL_DRAW, torch.arange(120).view(3, 40))
    params = SamplingParams(temperature=0.7)
    plain = sample_tokens(logits, 64, params, row_keys_)
    workspace = NoiseWorkspace()
    assert torch.equal(sample_tokens(logits, 64, params, row_keys_, workspace), plain)
    drawn = torch.rand(3, 40, generator=torch.Generator().manual_seed(0)) < 0.7  # more rows than one chunk
    assert int(drawn.sum()) > 32
    some = sample_tokens(logits, 64, params, row_keys_, workspace, drawn)
    assert torch.equal(some[drawn], plain[drawn]) and (some[~drawn] == 0).all()
    scores = filtered_scores(logits, 64, params)
    scores_kept = scores.clone()
    gumbel_argmax(scores, row_keys_, workspace)
    assert torch.equal(logits, kept) and torch.equal(scores, scores_kept)


ROW_PARAMS = [
    SamplingParams(),
    SamplingParams(temperature=0.7),
    SamplingParams(top_k=1),
    SamplingParams(top_k=5, temperature=1.3),
    SamplingParams(top_p=0.9),
    SamplingParams(top_p=0.5, top_k=20, temperature=0.8),
    SamplingParams(top_k=61),  # the whole vocabulary: no filter
    SamplingParams(top_p=1e-9),  # the top token alone
]


@pytest.mark.parametrize("rows", [ROW_PARAMS, ROW_PARAMS[:1], ROW_PARAMS[1:2], ROW_PARAMS[2:4], ROW_PARAMS[4:5]])
def test_per_row_parameters_give_each_row_its_per_batch_scores_and_tokens_exactly(rows):
    """The engine's draw: rows with their own temperature, top-p and top-k share one call, and each row's
    scores and token are those of the per-batch path with its own SamplingParams, bit for bit."""
    torch.manual_seed(0)
    logits = torch.randn(len(rows), 3, 64) * 4  # padded vocabulary 64 over 61 real tokens
    logits[:, :, 7] = logits[:, :, 8]  # a tie at every row
    parameters = row_parameters(rows, "cpu")
    filters = RowFilters.of(rows, 61)
    scores = row_filtered_scores(logits, 61, *(p[:, None] for p in parameters), filters)
    row_keys_ = keys(len(rows) * 3).view(len(rows), 3, 2)
    drawn = torch.ones(len(rows), 3, dtype=torch.bool)
    drawn[0, 2] = False
    tokens = sample_row_tokens(logits, 61, parameters, filters, row_keys_, drawn)
    for b, params in enumerate(rows):
        assert torch.equal(scores[b], filtered_scores(logits[b], 61, params))
        alone = sample_tokens(logits[b : b + 1], 61, params, row_keys_[b : b + 1])[0]
        assert torch.equal(tokens[b][drawn[b]], alone[drawn[b]])
    assert tokens[0, 2] == 0


def test_a_row_with_another_parameter_gets_other_scores():  # the test above can fail
    logits = torch.randn(2, 1, 64) * 4
    rows = [SamplingParams(top_k=3), SamplingParams()]
    scores = row_filtered_scores(
        logits, 61, *(p[:, None] for p in row_parameters(rows, "cpu")), RowFilters.of(rows, 61)
    )
    assert not torch.equal(scores[1], filtered_scores(logits[1], 61, rows[0]))
    assert RowFilters.of(rows, 61) == RowFilters(top_k=4, top_p=False)
    assert RowFilters.of([SamplingParams(top_k=100)], 61) == RowFilters()


def test_a_rows_token_depends_on_its_own_key_only():
    """The same logits row drawn with the same key gives the same token next to any other rows; another
    key gives another draw (over 64 keys, many tokens)."""
    logits = torch.zeros(64, 50, dtype=torch.float64)
    alone = [int(gumbel_argmax(logits[:1], keys(64)[i : i + 1])) for i in range(64)]
    assert gumbel_argmax(logits, keys(64)).tolist() == alone
    assert len(set(alone)) > 20


# -- how many positions each step unmasks --


def pooled_chi_square(obs: torch.Tensor, exp: torch.Tensor) -> float:
    """Pearson chi-square p-value, cells with expected count < 5 pooled into the smallest kept cell."""
    keep = exp >= 5
    obs_k, exp_k = obs[keep].clone(), exp[keep].clone()
    last = int(exp_k.argmin())
    obs_k[last] += obs[~keep].sum()
    exp_k[last] += exp[~keep].sum()
    stat = float(((obs_k - exp_k) ** 2 / exp_k).sum())
    return float(stats.chi2.sf(stat, df=obs_k.numel() - 1))


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_time_grid_runs_from_one_to_zero(schedule):
    t = time_grid(10, schedule)
    assert t.dtype == torch.float64 and t[0] == 1.0 and t[-1] == 0.0
    assert (t[1:] < t[:-1]).all()


def test_cosine_grid_is_the_authors_curve():
    t = time_grid(4, "cosine")
    s = torch.linspace(1, 0, 5, dtype=torch.float64)
    torch.testing.assert_close(t[1:-1], torch.cos((1 - s[1:-1]) * torch.pi / 2))


@pytest.mark.parametrize("n,steps", [(256, 256), (256, 64), (256, 16), (100, 7), (5, 1), (37, 36)])
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_deterministic_counts_cover_every_token_with_steps_forwards(n, steps, schedule):
    counts = deterministic_counts(n, steps, schedule)
    assert counts.shape == (steps,) and counts.sum() == n and (counts >= 1).all()


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_deterministic_counts_are_the_authors_step_by_step_rule(schedule):
    """known_k = max(floor(N (1 - t_k)), known_(k-1) + 1), one step at a time, for every T of small N and a
    few of N = 1024: the counts computed in one pass are its differences."""
    import math

    def step_by_step(n, steps):
        t, known = time_grid(steps, schedule), [0]
        for k in range(1, steps + 1):
            known.append(max(math.floor(n * (1.0 - t[k].item())), known[-1] + 1))
        return [b - a for a, b in zip(known, known[1:], strict=False)]

    cases = [(n, steps) for n in range(1, 40) for steps in range(1, n + 1)]
    cases += [(1024, steps) for steps in (1, 3, 7, 64, 255, 256, 1000, 1023, 1024)]
    for n, steps in cases:
        assert deterministic_counts(n, steps, schedule).tolist() == step_by_step(n, steps), (n, steps)


def test_linear_deterministic_counts_are_even():
    assert deterministic_counts(256, 16).tolist() == [16] * 16


def test_steps_above_tokens_rejected():
    with pytest.raises(UserError, match="steps=9"):
        deterministic_counts(8, 9)
    with pytest.raises(UserError, match="counts="):
        step_counts([8], 4, counts="sometimes")


def test_step_counts_are_per_sample_and_padded_after_a_samples_last_step():
    """Each sample spreads its own positions over its steps (None: one per position), its binomial draws
    from its own generator: a sample's row is the same alone and in a batch."""
    counts = step_counts([6, 3, 4], None)
    assert counts.tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    assert step_counts([6, 3], 3).tolist() == [deterministic_counts(6, 3).tolist(), [1, 1, 1]]
    batch = step_counts([9, 5], 4, counts="binomial", generators=[torch.Generator().manual_seed(s) for s in (1, 2)])
    alone = step_counts([5], 4, counts="binomial", generators=[torch.Generator().manual_seed(2)])
    assert torch.equal(batch[1], alone[0]) and batch.sum(1).tolist() == [9, 5]


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_binomial_counts_follow_lemma_4_1(schedule):
    """At step k, given m still-masked positions, the count is Binomial(m, (t_{k-1} - t_k) / t_{k-1})."""
    n, steps, trials = 40, 5, 4000
    counts = binomial_counts(n, steps, trials, schedule, torch.Generator().manual_seed(0))
    assert (counts.sum(1) == n).all()
    t = time_grid(steps, schedule)
    masked = torch.full((trials,), n)
    for k in range(steps - 1):  # the last step unmasks all that is left (probability 1)
        prob = float((t[k] - t[k + 1]) / t[k])
        # the conditional law depends on m: test the most frequent m values separately
        values, freq = masked.unique(return_counts=True)
        for m in values[freq >= 300].tolist():
            observed = counts[masked == m, k]
            expected = stats.binom(m, prob)
            support = torch.arange(m + 1)
            obs = torch.bincount(observed, minlength=m + 1).double()
            exp = torch.tensor(expected.pmf(support.numpy())) * observed.numel()
            p_value = pooled_chi_square(obs, exp)
            assert p_value > 1e-3, (k, m, p_value)
        masked = masked - counts[:, k]
    assert (masked == counts[:, -1]).all()


def test_chi_square_detects_a_wrong_probability():  # the Lemma 4.1 test can fail
    counts = binomial_counts(40, 5, 4000, "linear", torch.Generator().manual_seed(0))[:, 0]
    support = torch.arange(41)
    obs = torch.bincount(counts, minlength=41).double()
    exp = torch.tensor(stats.binom(40, 0.23).pmf(support.numpy())) * 4000
    assert pooled_chi_square(obs, exp) < 1e-3


def test_binomial_counts_can_be_zero_and_differ_across_batch():
    counts = binomial_counts(8, 8, 16, "linear", torch.Generator().manual_seed(1))
    assert (counts == 0).any()
    assert not (counts == counts[:1]).all()
