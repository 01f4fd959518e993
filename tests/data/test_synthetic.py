"""The known-entropy source: its entropy formula is exact (enumeration), the true model's NLL on its
samples matches it, and a wrong model is far from it (so the check can fail)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from aogpt_plugin.data.synthetic import MarkovSource, MarkovSpec
from aogpt_plugin.errors import ConfigError


def test_entropy_formula_equals_enumeration_of_every_sequence():
    source = MarkovSource(MarkovSpec(vocab=3, order=2, branching=2, alpha=0.7, seed=4))
    n = 5
    x = torch.tensor(list(itertools.product(range(3), repeat=n)))
    logp = source.log_prob(x)
    p = logp.exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)  # a normalised joint over all 3^5 sequences
    exact = float(-(p[p > 0] * logp[p > 0]).sum())
    assert source.sequence_entropy(n) == pytest.approx(exact, abs=1e-10)


def test_the_chain_is_stationary_and_context_matters():
    source = MarkovSource(MarkovSpec.parse("markov:vocab=32,order=2,branching=4,alpha=0.5,seed=0"))
    assert float((source.step_distribution(source.stationary) - source.stationary).abs().sum()) < 1e-12
    assert source.unigram_entropy() - source.optimum_nll(32) > 1.0  # context explains over a nat per token


@pytest.mark.parametrize("seed", [0, 1])
def test_the_true_models_nll_on_samples_matches_the_entropy(seed):
    source = MarkovSource(MarkovSpec(vocab=32, order=2, branching=4, seed=seed))
    x = source.sample(20_000, 32, torch.Generator().manual_seed(9))
    per_seq = -source.log_prob(x) / 32
    se = float(per_seq.std()) / math.sqrt(len(per_seq))
    assert abs(float(per_seq.mean()) - source.optimum_nll(32)) < 4 * se


def test_a_wrong_model_is_far_from_the_entropy():
    """The companion case: samples of one source scored by another are nowhere near its entropy."""
    source, other = MarkovSource(MarkovSpec(seed=0)), MarkovSource(MarkovSpec(seed=1, branching=32))
    x = source.sample(5000, 32, torch.Generator().manual_seed(9))
    wrong = float((-other.log_prob(x) / 32).mean())
    assert wrong - source.optimum_nll(32) > 1.0


def test_samples_are_reproducible_and_in_vocabulary():
    source = MarkovSource(MarkovSpec(vocab=16, order=1, branching=3, seed=2))
    a = source.sample(64, 20, torch.Generator().manual_seed(5))
    assert torch.equal(a, source.sample(64, 20, torch.Generator().manual_seed(5)))
    assert a.shape == (64, 20) and int(a.min()) >= 0 and int(a.max()) < 16


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("wikitext", "is not a synthetic source"),
        ("markov:vocab=32,colour=2", "unknown field 'colour'"),
        ("markov:vocab=x", "vocab='x' is not a number"),
        ("markov:vocab=4,branching=5", "1 <= branching <= vocab"),
        ("markov:vocab=1000,order=3", "contexts is too many"),
    ],
)
def test_bad_specs_are_one_line(spec, message):
    with pytest.raises(ConfigError, match=message):
        MarkovSpec.parse(spec)
