"""Context-order ensemble (Eq. 4): the batched i+1-slot computation against a naive full forward per
(i, m), probability-space averaging, normalisation by enumeration, and its slot count."""

import itertools
import math

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.eval.ensemble import SlotCost, context_permutations, ensemble_nll, ensemble_sizes, member_nlls
from aogpt_plugin.eval.perplexity import base_order
from aogpt_plugin.likelihood import token_nlls

SEED_PARTS = (5, 2, 1)  # (seed, chunk, draw)


def naive_member_nlls(model, tokens, sigma, members, seed_parts=SEED_PARTS) -> torch.Tensor:
    """The authors' way: a full n-slot forward for every (i, m), keeping slot i."""
    n = tokens.numel()
    out = torch.zeros(n, members, dtype=torch.float64)
    out[:, 0] = token_nlls(model, tokens[None], sigma[None])[0]
    for i in range(n):
        perms = context_permutations(*seed_parts, i, members - 1)
        for m in range(1, members):
            order = torch.cat([sigma[:i][perms[m - 1]], sigma[i:]])
            out[i, m] = token_nlls(model, tokens[None], order[None])[0, i]
    return out


def fast(model, tokens, sigma, members, budget, cost=None):
    base = token_nlls(model, tokens[None], sigma[None])[0]
    return member_nlls(model, tokens, sigma, base, members, SEED_PARTS, budget, cost)


@pytest.mark.parametrize(("conditioning", "budget"), [("adaln", 40), ("adaln", 7), ("concat", 1000)])
def test_batched_members_equal_a_full_forward_per_target_and_member(conditioning, budget):
    model = tiny_model(conditioning=conditioning, preset="eval")
    tokens = torch.randint(0, 97, (14,), generator=torch.Generator().manual_seed(0))
    sigma = base_order("random", 14, seed=0, chunk=0, draw=0)
    got = fast(model, tokens, sigma, 5, budget)
    want = naive_member_nlls(model, tokens, sigma, 5)
    assert torch.allclose(got, want, atol=1e-5)
    assert got[2:, 1:].std() > 0.1  # the members really differ: the test can tell orders apart


def test_one_member_is_the_plain_any_order_nll(model):
    tokens = torch.randint(0, 97, (16,), generator=torch.Generator().manual_seed(3))
    sigma = base_order("random", 16, 0, 0, 0)
    nll = fast(model, tokens, sigma, 1, 64)
    assert nll.shape == (16, 1)
    assert torch.equal(ensemble_nll(nll, 1), token_nlls(model, tokens[None], sigma[None])[0].double())


def test_members_are_averaged_in_probability_space(model):
    tokens = torch.randint(0, 97, (12,), generator=torch.Generator().manual_seed(4))
    sigma = base_order("random", 12, 0, 0, 0)
    nll = fast(model, tokens, sigma, 4, 64)
    i = 9
    probs = [math.exp(-v) for v in nll[i].tolist()]
    assert ensemble_nll(nll, 4)[i].item() == pytest.approx(-math.log(sum(probs) / 4), rel=1e-12)
    assert ensemble_nll(nll, 4)[i].item() < nll[i].mean().item()  # Jensen: not the mean of the NLLs
    assert torch.equal(ensemble_nll(nll, 4)[:2], nll[:2, 0])  # <= 1 context token: one possible order


def test_ensemble_joint_is_a_normalised_distribution_by_enumeration():
    """2-token vocabulary, 3-token sequences: sum over all 8 sequences of prod_i p_ens = 1."""
    model = tiny_model(vocab_size=2, max_seq_len=3, scale=4.0, preset="eval")
    sigma = torch.tensor([2, 0, 1])
    joint = []
    for seq in itertools.product([0, 1], repeat=3):
        nll = fast(model, torch.tensor(seq), sigma, 4, 8)
        joint.append(math.exp(-ensemble_nll(nll, 4).sum().item()))
        assert nll[2].std() > 1e-3  # the two context orders give different conditionals
    assert sum(joint) == pytest.approx(1.0, abs=1e-6)
    assert max(joint) > 0.2  # far from uniform (1/8), so normalisation is not trivially true


def test_smaller_ensembles_are_prefixes_of_larger_ones(model):
    tokens = torch.randint(0, 97, (10,), generator=torch.Generator().manual_seed(5))
    sigma = base_order("random", 10, 0, 0, 0)
    big, small = fast(model, tokens, sigma, 8, 30), fast(model, tokens, sigma, 2, 30)
    # equal up to float32 rounding of differently shaped batches
    assert torch.allclose(big[:, :2], small, atol=1e-5)
    assert not torch.allclose(big[2:, 2], small[2:, 1], atol=1e-2)  # and member 2 is another order


def test_slot_count_against_the_authors_way(model):
    n, members = 10, 4
    cost = SlotCost()
    tokens = torch.zeros(n, dtype=torch.long)
    fast(model, tokens, torch.arange(n), members, budget=1000, cost=cost)
    needed = n + (members - 1) * sum(i + 1 for i in range(2, n))
    assert cost.needed == needed == 10 + 3 * 52
    assert cost.authors == (n + 1) + (members - 1) * n * (n + 1)
    assert cost.computed >= cost.needed
    assert cost.as_dict()["saving"] == pytest.approx(cost.authors / cost.computed)
    # with a budget of one row per forward there is no padding at all
    exact = SlotCost()
    fast(model, tokens, torch.arange(n), members, budget=1, cost=exact)
    assert exact.computed == exact.needed


def test_ensemble_sizes_are_powers_of_two_and_the_requested_size():
    assert ensemble_sizes(1) == [1]
    assert ensemble_sizes(8) == [1, 2, 4, 8]
    assert ensemble_sizes(6) == [1, 2, 4, 6]


def test_context_permutations_are_permutations_and_nested_in_the_count():
    perms = context_permutations(seed=0, chunk=1, draw=0, index=12, count=7)
    assert perms.shape == (7, 12)
    assert all(torch.equal(torch.sort(p).values, torch.arange(12)) for p in perms)
    assert torch.equal(context_permutations(0, 1, 0, 12, 3), perms[:3])
    assert not torch.equal(context_permutations(0, 1, 0, 13, 3)[:, :12], perms[:3])


def test_no_members_beyond_the_base_gives_an_empty_draw():
    assert context_permutations(0, 0, 0, 5, 0).shape == (0, 5)
