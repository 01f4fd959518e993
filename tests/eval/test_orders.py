"""Evaluation orders are pure functions of (seed, chunk, draw[, index])."""

import torch

from aogpt_plugin.eval.orders import base_order, context_permutations


def test_l2r_is_the_identity():
    assert torch.equal(base_order("l2r", 9, seed=3, chunk=4, draw=1), torch.arange(9))


def test_random_orders_are_permutations_fixed_by_seed_chunk_and_draw():
    a = base_order("random", 50, seed=0, chunk=7, draw=2)
    assert torch.equal(torch.sort(a).values, torch.arange(50))
    assert torch.equal(a, base_order("random", 50, seed=0, chunk=7, draw=2))
    others = [base_order("random", 50, 1, 7, 2), base_order("random", 50, 0, 8, 2), base_order("random", 50, 0, 7, 3)]
    assert all(not torch.equal(a, b) for b in others)


def test_context_permutations_are_permutations_and_nested_in_the_count():
    perms = context_permutations(seed=0, chunk=1, draw=0, index=12, count=7)
    assert perms.shape == (7, 12)
    assert all(torch.equal(torch.sort(p).values, torch.arange(12)) for p in perms)
    assert torch.equal(context_permutations(0, 1, 0, 12, 3), perms[:3])
    assert not torch.equal(context_permutations(0, 1, 0, 13, 3)[:, :12], perms[:3])


def test_no_members_beyond_the_base_gives_an_empty_draw():
    assert context_permutations(0, 0, 0, 5, 0).shape == (0, 5)
