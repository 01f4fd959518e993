"""Order distributions: valid permutations, the right shapes, seeded and independent across streams."""

from __future__ import annotations

import math

import pytest
import torch

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.orders import L2RCurriculum, OrderSampler, blockwise_order, check_curriculum
from aogpt_plugin.seeding import stream_generator


def _is_perm(o, n):
    return sorted(o.tolist()) == list(range(n))


def test_random_is_a_fresh_permutation_per_index_and_deterministic():
    s = OrderSampler("random", 32, seed=5)
    a, b = s.sample(0, 0), s.sample(0, 1)
    assert _is_perm(a, 32) and _is_perm(b, 32) and not torch.equal(a, b)
    assert torch.equal(a, OrderSampler("random", 32, seed=5).sample(0, 0))
    assert not torch.equal(a, s.sample(1, 0))  # another rank draws another stream
    assert not torch.equal(a, OrderSampler("uniform", 32, seed=6).sample(0, 0))


def test_mixture_rate_of_left_to_right():
    s = OrderSampler("mixture", 16, p_l2r=0.1, seed=0)
    ident = torch.arange(16)
    hits = sum(torch.equal(s.sample(0, i), ident) for i in range(4000))
    # Binomial(4000, 0.1): mean 400, sd 19 -> a 5-sd window
    assert 305 < hits < 495
    assert all(torch.equal(OrderSampler("mixture", 8, p_l2r=1.0).sample(0, i), torch.arange(8)) for i in range(20))
    assert not any(torch.equal(OrderSampler("mixture", 8, p_l2r=0.0).sample(0, i), torch.arange(8)) for i in range(50))


def test_uniform_positions_are_uniform():
    """Each position lands in each slot equally often (chi-square-ish bound on counts)."""
    n, draws = 6, 6000
    s = OrderSampler("uniform", n, seed=1)
    counts = torch.zeros(n, n)
    for i in range(draws):
        counts[torch.arange(n), s.sample(0, i)] += 1
    expected = draws / n
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 60  # 25 degrees of freedom: p(chi2 > 60) < 1e-4


def test_l2r_and_fixed_random():
    assert torch.equal(OrderSampler("l2r", 10).sample(3, 7), torch.arange(10))
    s = OrderSampler("fixed_random", 10, seed=4)
    a = s.sample(0, 0)
    assert _is_perm(a, 10) and not torch.equal(a, torch.arange(10))
    assert torch.equal(a, s.sample(1, 99)) and torch.equal(a, OrderSampler("fixed_random", 10, seed=4).sample(0, 5))


@pytest.mark.parametrize("n, k", [(12, 4), (10, 4), (7, 1), (5, 8)])
def test_blockwise_keeps_blocks_left_to_right_with_one_intra_block_permutation(n, k):
    o = OrderSampler(f"blockwise:{k}", n, seed=3).sample(0, 0)
    assert _is_perm(o, n)
    blocks = [o[i : i + k] for i in range(0, n, k)]
    for b, blk in enumerate(blocks):
        assert set(blk.tolist()) == set(range(b * k, min(n, (b + 1) * k)))
    if n % k == 0 and n > k:
        rel = [blk - i * k for i, blk in enumerate(blocks)]
        assert all(torch.equal(r, rel[0]) for r in rel)


def test_blockwise_short_last_block_keeps_relative_order():
    o = blockwise_order(6, 4, stream_generator("train_order", 0))
    first, last = o[:4], o[4:] - 4
    assert [int(x) for x in first if x < 2] == last.tolist()


@pytest.mark.parametrize("spec", ["zigzag", "blockwise", "blockwise:0", "blockwise:-2", "uniform:3"])
def test_bad_specs(spec):
    with pytest.raises(ConfigError, match="aogpt.order"):
        OrderSampler(spec, 8)


def test_bad_p_l2r():
    with pytest.raises(ConfigError, match=r"aogpt.p_l2r=1.2 is outside the allowed range \[0, 1\]"):
        OrderSampler("mixture", 8, p_l2r=1.2)


def test_old_spelling_uniform_is_an_alias_of_random_with_a_note():
    with pytest.warns(FutureWarning, match="aogpt.order='uniform' is now spelled 'random'"):
        s = OrderSampler("uniform", 16, seed=5)
    assert s.kind == "random"
    assert torch.equal(s.sample(2, 3), OrderSampler("random", 16, seed=5).sample(2, 3))


# ---- the left-to-right curriculum -------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_the_curriculum_falls_from_one_to_p_l2r_over_its_steps(shape):
    c = L2RCurriculum(10, shape)
    shares = [c.share(step, 0.1) for step in range(1, 14)]
    assert shares[0] == 1.0 and shares[10:] == [0.1, 0.1, 0.1]  # step 1: all left to right; from step 11: p_l2r
    assert all(a > b for a, b in zip(shares[:10], shares[1:11], strict=True))  # falls at every step
    assert shares[5] == pytest.approx(0.55)  # half way (step 6 of 10): both shapes at the middle
    quarter = L2RCurriculum(8, shape).share(3, 0.0)  # a quarter of the way
    assert quarter == pytest.approx(0.75 if shape == "linear" else (1 + math.cos(math.pi / 4)) / 2)
    assert L2RCurriculum(0, shape).share(1, 0.1) == 0.1  # off: p_l2r from the start


def test_the_step_of_a_sequence_counts_a_streams_sequences_per_step():
    c = L2RCurriculum(4, sequences_per_step=3)
    assert [c.step_of(i) for i in range(7)] == [1, 1, 1, 2, 2, 2, 3]


def test_under_the_curriculum_the_first_steps_read_left_to_right_then_mixture():
    """Step 1 draws only left to right (share 1.0); after the curriculum the share is p_l2r's (binomial
    window). The same sampler without curriculum draws p_l2r at step 1: the curriculum is what differs."""
    ident, per_step = torch.arange(16), 500
    c = L2RCurriculum(2, sequences_per_step=per_step)
    with_curriculum = OrderSampler("mixture", 16, p_l2r=0.1, seed=0, curriculum=c)
    plain = OrderSampler("mixture", 16, p_l2r=0.1, seed=0)
    first = [torch.equal(with_curriculum.sample(0, i), ident) for i in range(per_step)]
    after = [torch.equal(with_curriculum.sample(0, i), ident) for i in range(2 * per_step, 6 * per_step)]
    assert all(first)
    assert 150 < sum(after) < 250  # Binomial(2000, 0.1): mean 200, sd 13.4
    assert 20 < sum(torch.equal(plain.sample(0, i), ident) for i in range(per_step)) < 80  # Binomial(500, 0.1)
    for i in range(2 * per_step, 2 * per_step + 50):  # once it is over, the orders are the plain sampler's
        assert torch.equal(with_curriculum.sample(0, i), plain.sample(0, i))


def test_without_a_curriculum_the_orders_are_bitwise_the_old_ones():
    off = OrderSampler("mixture", 16, p_l2r=0.1, seed=3, curriculum=L2RCurriculum(0, sequences_per_step=7))
    plain = OrderSampler("mixture", 16, p_l2r=0.1, seed=3)
    assert all(torch.equal(off.sample(1, i), plain.sample(1, i)) for i in range(200))


@pytest.mark.parametrize(
    "steps, shape, order, message",
    [
        (-1, "linear", "mixture", "aogpt.l2r_curriculum_steps=-1 is not allowed; allowed: 0 \\(off\\) or >= 1"),
        (5, "exp", "mixture", "aogpt.l2r_curriculum='exp' is not supported; allowed: linear, cosine"),
        (5, "linear", "random", "only aogpt.order='mixture' has \\(got 'random'\\)"),
    ],
)
def test_bad_curricula_are_one_line(steps, shape, order, message):
    with pytest.raises(ConfigError, match=message):
        check_curriculum(steps, shape, order)
    with pytest.raises(ConfigError, match=message):  # what the sampler is handed is checked too
        OrderSampler(order, 8, curriculum=L2RCurriculum(max(steps, 0), "linear") if order != "mixture" else None)
        L2RCurriculum(steps, shape)
