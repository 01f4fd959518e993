"""score_chunks (the engine behind `aogpt eval ppl`) against plain computations, and the estimator's
standard errors."""

import math

import pytest
import torch

from aogpt_plugin.eval.ensemble import ensemble_nll
from aogpt_plugin.eval.perplexity import base_order, estimate, score_chunks
from aogpt_plugin.likelihood import token_nlls

from .test_ensemble import naive_member_nlls


@pytest.fixture(scope="module")
def chunks():
    return torch.randint(0, 97, (3, 10), generator=torch.Generator().manual_seed(7))


def loop_l2r_nll(model, seq: torch.Tensor) -> float:
    """Mean NLL of x_j given x_<j, one forward of the prefix x_<=j per position j ([None] predicts x_0)."""
    vocab, total = model.model_args.vocab_size, 0.0
    for j in range(seq.numel()):
        logits = model(seq[None, : j + 1])[0, j, :vocab]
        total -= torch.log_softmax(logits.double(), -1)[seq[j]].item()
    return total / seq.numel()


def test_l2r_ppl_is_exp_of_the_mean_nll_of_a_plain_loop(model, chunks):
    scores = score_chunks(model, chunks, "l2r", batch_size=2)
    est = scores.estimates()[1]
    want = sum(loop_l2r_nll(model, c) for c in chunks) / 3
    assert est.nll == pytest.approx(want, abs=1e-5)
    assert est.ppl == pytest.approx(math.exp(want), rel=1e-5)
    assert est.se_orders == 0.0


def test_any_order_scores_each_chunk_in_its_seeded_orders(model, chunks):
    scores = score_chunks(model, chunks, "random", draws=2, seed=3, batch_size=4)
    for c in range(3):
        for k in range(2):
            sigma = base_order("random", 10, 3, c, k)
            want = token_nlls(model, chunks[c : c + 1], sigma[None]).double().mean().item()
            assert scores.per_draw_nll[c, k, 0].item() == pytest.approx(want, abs=1e-6)
    assert scores.estimates()[1].nll == pytest.approx(scores.per_draw_nll.mean().item(), rel=1e-12)
    # a different seed draws other orders; the same seed the same numbers at any batch size
    assert not torch.allclose(score_chunks(model, chunks, "random", draws=2, seed=4).per_draw_nll, scores.per_draw_nll)
    again = score_chunks(model, chunks, "random", draws=2, seed=3, batch_size=1).per_draw_nll
    assert torch.allclose(again, scores.per_draw_nll, atol=1e-6)


def test_one_member_ensemble_is_the_plain_any_order_nll(model, chunks):
    plain = score_chunks(model, chunks, "random", draws=2, seed=1)
    ens = score_chunks(model, chunks, "random", draws=2, seed=1, members=4)
    assert ens.sizes == [1, 2, 4]
    assert torch.equal(ens.per_draw_nll[..., 0], plain.per_draw_nll[..., 0])
    assert not torch.allclose(ens.per_draw_nll[..., 2], plain.per_draw_nll[..., 0])


def test_ensemble_through_score_chunks_equals_the_naive_reference(model, chunks):
    scores = score_chunks(model, chunks[:2], "random", draws=1, seed=2, members=3, batch_size=1)
    for c in range(2):
        sigma = base_order("random", 10, 2, c, 0)
        naive = naive_member_nlls(model, chunks[c], sigma, 3, seed_parts=(2, c, 0))
        for s, size in enumerate([1, 2, 3]):
            want = ensemble_nll(naive, size).mean().item()
            assert scores.per_draw_nll[c, 0, s].item() == pytest.approx(want, abs=1e-5)
    assert scores.cost.authors == 2 * ((10 + 1) + 2 * 10 * 11)
    assert scores.cost.needed == 2 * (10 + 2 * sum(i + 1 for i in range(2, 10)))


def test_standard_errors():
    values = torch.tensor([[1.0, 3.0], [2.0, 2.0], [4.0, 6.0]], dtype=torch.float64)
    e = estimate(values)
    assert e.nll == pytest.approx(3.0)
    assert e.ppl == pytest.approx(math.exp(3.0))
    # per-chunk variances 2, 0, 2 -> sqrt((2 + 0 + 2) / 2) / 3
    assert e.se_orders == pytest.approx(math.sqrt(2.0) / 3)
    # chunk means 2, 2, 5 -> std sqrt(3) / sqrt(3) = 1
    assert e.se_chunks == pytest.approx(1.0)
    single = estimate(values[:, :1])
    assert single.se_orders is None and estimate(values[:1]).se_chunks is None
    assert estimate(values[:, :1], deterministic=True).se_orders == 0.0


def test_the_cost_table_replays_the_grouping_of_a_run(model, chunks):
    from aogpt_plugin.eval.ensemble import pair_cost

    scores = score_chunks(model, chunks[:1], "random", members=3, batch_size=2)
    table = pair_cost(10, 3, batch_size=2)
    assert scores.cost.computed == table["slots_computed"]
    assert (scores.cost.needed, scores.cost.authors) == (table["slots_needed"], table["slots_authors"])
    assert table["attention_authors"] == (1 + 2 * 10) * 11 * 12 // 2


def test_l2r_is_the_identity():
    assert torch.equal(base_order("l2r", 9, seed=3, chunk=4, draw=1), torch.arange(9))


def test_random_orders_are_permutations_fixed_by_seed_chunk_and_draw():
    a = base_order("random", 50, seed=0, chunk=7, draw=2)
    assert torch.equal(torch.sort(a).values, torch.arange(50))
    assert torch.equal(a, base_order("random", 50, seed=0, chunk=7, draw=2))
    others = [base_order("random", 50, 1, 7, 2), base_order("random", 50, 0, 8, 2), base_order("random", 50, 0, 7, 3)]
    assert all(not torch.equal(a, b) for b in others)


def test_bits_per_byte_spreads_the_nll_over_the_bytes_and_is_nan_without_any():
    import math

    from aogpt_plugin.eval.perplexity import bits_per_byte

    lengths = torch.tensor([0, 2, 3])  # id 0 spells no byte (an EOS)
    assert bits_per_byte(1.0, torch.tensor([[1, 2, 0]]), lengths) == pytest.approx(3 / (math.log(2) * 5))
    assert math.isnan(bits_per_byte(1.0, torch.tensor([[0, 0]]), lengths))
