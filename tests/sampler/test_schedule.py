"""Time grids and per-step token counts, including Lemma 4.1's binomial law."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler.schedule import binomial_counts, deterministic_counts, step_counts, time_grid


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


def test_linear_deterministic_counts_are_even():
    assert deterministic_counts(256, 16).tolist() == [16] * 16


def test_steps_above_tokens_rejected():
    with pytest.raises(UserError, match="steps=9"):
        deterministic_counts(8, 9)
    with pytest.raises(UserError, match="counts="):
        step_counts(8, 4, 1, counts="sometimes")


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
