"""The scoring primitives: the validator's token_nlls / nll_sum_and_count, and the one-slot head path
the ensemble uses, checked against the model's own forward and a plain loop over positions."""

import math

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.likelihood import (
    nll_sum_and_count,
    other_context_nlls,
    slot_nlls,
    token_nll,
    token_nlls,
)


@pytest.fixture(scope="module")
def model():
    return tiny_model(preset="eval")


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 97, (3, 20), generator=g)
    order = torch.stack([torch.randperm(20, generator=g) for _ in range(3)])
    return tokens, order


def loop_l2r_nlls(model, tokens: torch.Tensor) -> list[float]:
    """NLL of x_j given x_<j, one forward of the prefix x_<=j per position j."""
    vocab = model.model_args.vocab_size
    out = []
    for j in range(tokens.numel()):
        logits = model(tokens[None, : j + 1])[0, j, :vocab]
        out.append(-torch.log_softmax(logits.double(), -1)[tokens[j]].item())
    return out


def test_l2r_token_nlls_equal_a_plain_loop_over_positions(model, batch):
    tokens, _ = batch
    nll = token_nlls(model, tokens, None)
    for row in range(tokens.shape[0]):
        assert nll[row].tolist() == pytest.approx(loop_l2r_nlls(model, tokens[row]), abs=1e-4)


def test_nll_sum_and_count_is_the_sum_of_token_nlls(model, batch):
    tokens, order = batch
    total, count = nll_sum_and_count(model, tokens, order)
    assert count == tokens.numel()
    assert total.dtype == torch.float64
    assert total.item() == pytest.approx(token_nlls(model, tokens, order).double().sum().item(), rel=1e-9)


def test_token_nlls_score_tokens_in_the_order(model, batch):
    tokens, order = batch
    logits = model(tokens, order=order)
    expected = token_nll(logits, torch.gather(tokens, 1, order), model.model_args.vocab_size)
    assert torch.equal(token_nlls(model, tokens, order), expected)
    assert not torch.allclose(token_nlls(model, tokens, order), token_nlls(model, tokens, None))


@pytest.mark.parametrize("ordered", [False, True])
def test_other_context_nlls_score_the_own_targets_from_another_rows_tokens(model, batch, ordered):
    tokens, order = batch
    order = order if ordered else None
    same = tokens[:1].expand(3, -1)  # identical rows: another row's context is the own one, gain 0
    assert torch.equal(other_context_nlls(model, same, order), token_nlls(model, same, order))
    wrong = other_context_nlls(model, tokens, order)
    labels = tokens if order is None else torch.gather(tokens, 1, order)
    expected = token_nll(model(tokens.roll(1, 0), order=order), labels, model.model_args.vocab_size)
    assert torch.equal(wrong, expected)
    # not the rolled rows scored on their own targets (a permutation of token_nlls: zero mean gain)
    assert not torch.allclose(wrong, token_nlls(model, tokens.roll(1, 0), order))


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_hidden_then_head_is_the_model_forward(conditioning, batch):
    model = tiny_model(conditioning=conditioning, preset="eval")
    tokens, order = batch
    h, cond = model.hidden(tokens, order)
    assert torch.allclose(model.head(h, cond), model(tokens, order=order), atol=1e-5)


def test_an_order_prefix_gives_the_same_slots_as_the_full_order(model, batch):
    tokens, order = batch
    full, _ = model.hidden(tokens, order)
    prefix, _ = model.hidden(tokens, order[:, :7])
    assert prefix.shape[1] == 7
    assert torch.allclose(prefix, full[:, :7], atol=1e-5)


def test_slot_nlls_read_one_slot_per_row(model, batch):
    tokens, order = batch
    slots = torch.tensor([0, 5, 19])
    expected = token_nlls(model, tokens, order)[torch.arange(3), slots]
    assert torch.allclose(slot_nlls(model, tokens, order, slots), expected, atol=1e-5)
    # an order cut right after the slot scores the same
    short = slot_nlls(model, tokens[:1], order[:1, :6], torch.tensor([5]))
    assert short.item() == pytest.approx(token_nlls(model, tokens, order)[0, 5].item(), abs=1e-5)


def test_nlls_are_normalised_over_the_real_vocabulary_only(batch):
    model = tiny_model(vocab_size=70, preset="eval")  # padded to 128 rows
    tokens, _ = batch
    tokens = tokens % 70
    logits = model(tokens)
    probs = torch.softmax(logits[..., :70].double(), -1)
    assert probs.sum(-1).allclose(torch.ones_like(probs[..., 0]))
    nll = token_nlls(model, tokens, None)
    assert nll[0, 3].item() == pytest.approx(-math.log(probs[0, 3, tokens[0, 3]].item()), abs=1e-4)
