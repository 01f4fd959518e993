"""The scoring primitives: the validator's token_nlls / nll_sum_and_count, and the one-slot head path
the ensemble uses, checked against the model's own forward and a plain loop over positions."""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from aogpt_plugin.likelihood import (
    IGNORE_INDEX,
    ao_cross_entropy,
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


# ---- the training cross-entropy, chunked over rows (ao_cross_entropy) ----------------------------

CE_VOCAB, CE_PADDED = 500, 512  # real vocabulary, head rows padded to a multiple of 64


def _unchunked_ce(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The training loss as it was before chunking: F.cross_entropy over the real-vocabulary slice,
    upcast to float32 as a whole."""
    logits = pred[..., :CE_VOCAB].flatten(0, 1).float()
    return F.cross_entropy(logits, labels.flatten(0, 1), reduction="sum", ignore_index=IGNORE_INDEX)


def _ce_batch(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pred = (torch.randn(3, 70, CE_PADDED, generator=g) * 4).to(dtype)
    pred[..., CE_VOCAB:] = 1e4  # padded rows would dominate any softmax that included them
    labels = torch.randint(0, CE_VOCAB, (3, 70), generator=g)
    labels[0, :9] = IGNORE_INDEX
    labels[2, 40] = IGNORE_INDEX
    return pred.requires_grad_(True), labels


def _loss_and_grad(fn, pred, labels):
    pred = pred.detach().requires_grad_(True)
    loss = fn(pred, labels)
    (grad,) = torch.autograd.grad(loss, pred)
    return loss.detach(), grad


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 210, 10**6])  # 210 rows in all: uneven, exact and one chunk
def test_chunked_ce_equals_the_unchunked_loss_and_gradients_in_float32(chunk_rows):
    pred, labels = _ce_batch(torch.float32)
    ref_loss, ref_grad = _loss_and_grad(_unchunked_ce, pred, labels)
    loss, grad = _loss_and_grad(lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, chunk_rows), pred, labels)
    assert loss.dtype == torch.float32 and grad.dtype == torch.float32
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert ((grad - ref_grad).norm() / ref_grad.norm()).item() <= 1e-6
    assert torch.allclose(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert torch.count_nonzero(grad[..., CE_VOCAB:]) == 0  # padded rows take no part
    assert torch.count_nonzero(grad[0, :9]) == 0 and torch.count_nonzero(grad[2, 40]) == 0  # ignored labels
    # and a case the comparison must catch: a loss that lets the padded rows take mass
    padded = F.cross_entropy(pred.detach().flatten(0, 1), labels.flatten(), reduction="sum", ignore_index=IGNORE_INDEX)
    assert padded.item() != pytest.approx(loss.item(), rel=1e-3)


def test_chunked_ce_is_as_close_to_float64_as_the_unchunked_loss():
    pred, labels = _ce_batch(torch.float32, seed=1)
    exact_loss, exact_grad = _loss_and_grad(_unchunked_ce, pred.double(), labels)
    for fn in (_unchunked_ce, lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, 16)):
        loss, grad = _loss_and_grad(fn, pred, labels)
        assert loss.double().item() == pytest.approx(exact_loss.item(), rel=1e-6)
        assert ((grad.double() - exact_grad).norm() / exact_grad.norm()).item() <= 1e-6


def _bf16_steps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many bfloat16 steps (units in the last place) separate two bfloat16 tensors, elementwise."""

    def ordinal(t: torch.Tensor) -> torch.Tensor:  # consecutive bf16 numbers get consecutive integers
        bits = t.view(torch.int16).int()
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordinal(a) - ordinal(b)).abs()


def test_chunked_ce_on_bfloat16_logits_equals_the_unchunked_loss_and_gradients_to_one_bfloat16_step():
    """bfloat16 logits (autocast): both losses score the same bf16 values in float32, so the loss agrees
    to float32 rounding (1e-6 relative); each gradient element is rounded from float32 to bfloat16 by
    both, so it is the same bf16 number or, where the float32 values differ by their rounding and
    straddle a bf16 rounding boundary, one bf16 step apart (measured: 0.02% of elements)."""
    pred, labels = _ce_batch(torch.bfloat16, seed=2)
    ref_loss, ref_grad = _loss_and_grad(_unchunked_ce, pred, labels)
    loss, grad = _loss_and_grad(lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, 32), pred, labels)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    steps = _bf16_steps_apart(grad, ref_grad)
    assert steps.max().item() <= 1
    assert (steps > 0).float().mean().item() <= 1e-3
    assert torch.count_nonzero(grad[..., CE_VOCAB:]) == 0
    # one bf16 step is a real difference: a gradient scaled by 1 + 2^-7 is caught
    assert _bf16_steps_apart((ref_grad.float() * (1 + 2**-6)).bfloat16(), ref_grad).max().item() >= 1


def test_chunked_ce_under_bfloat16_autocast_is_the_float32_computation():
    pred, labels = _ce_batch(torch.bfloat16, seed=3)
    plain = ao_cross_entropy(pred.detach(), labels, CE_VOCAB, 50)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = ao_cross_entropy(pred.detach(), labels, CE_VOCAB, 50)
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)


class _LargestFloat32(TorchDispatchMode):
    """Records the largest float32 tensor any op produces (forward and backward run on this thread)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.largest = max(self.largest, t.numel())
        return out


def _largest_float32_of_loss_and_backward(fn, pred, labels) -> int:
    pred = pred.detach().requires_grad_(True)
    with _LargestFloat32() as seen:
        fn(pred, labels).backward()
    return seen.largest


def test_chunked_ce_never_holds_the_whole_batchs_float32_logits():
    """bf16 logits of 210 rows: the chunked loss makes no float32 tensor larger than one chunk of
    real-vocabulary logits; the unchunked loss makes 210 x 500 of them (the case that must fail)."""
    pred, labels = _ce_batch(torch.bfloat16)
    rows = labels.numel()
    chunked = _largest_float32_of_loss_and_backward(lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, 32), pred, labels)
    assert chunked <= 32 * CE_VOCAB
    unchunked = _largest_float32_of_loss_and_backward(_unchunked_ce, pred, labels)
    assert unchunked >= rows * CE_VOCAB


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_chunked_ce_compiles_in_one_graph_with_the_same_loss_and_gradients(backend):
    """The recipes compile the loss (`[compile] components = ["model", "loss"]`): one graph, no break."""
    pred, labels = _ce_batch(torch.float32, seed=4)
    ref_loss, ref_grad = _loss_and_grad(_unchunked_ce, pred, labels)
    compiled = torch.compile(lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, 64), backend=backend, fullgraph=True)
    loss, grad = _loss_and_grad(compiled, pred, labels)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert ((grad - ref_grad).norm() / ref_grad.norm()).item() <= 1e-6


@pytest.mark.slow
def test_compiled_chunked_ce_allocates_no_float32_logits():
    """The recipes compile the loss: inductor's code for the forward and backward must not allocate a
    float32 buffer of logits either (the backward is one fused pass, bf16 logits in, bf16 gradient out).
    A backward that scattered into a materialised softmax allocated a float32 buffer per chunk, all
    alive to its end."""
    import re

    from torch._inductor.utils import run_and_get_code

    pred, labels = _ce_batch(torch.bfloat16, seed=5)
    torch._dynamo.reset()
    compiled = torch.compile(lambda p, y: ao_cross_entropy(p, y, CE_VOCAB, 64), backend="inductor")
    _, code = run_and_get_code(lambda: compiled(pred, labels).backward())
    buffers = re.findall(r"empty_strided_\w+\(\(([\d, ]+)\), \([\d, ]*\), torch\.(\w+)\)", "\n".join(code))
    largest_float32 = max(
        (math.prod(int(d) for d in shape.split(",") if d.strip()) for shape, dtype in buffers if dtype == "float32"),
        default=0,
    )
    assert buffers and largest_float32 < 64 * CE_VOCAB


def test_compiled_ce_computes_each_gradient_entry_once_whatever_the_chunk_rows():
    """Inductor's code for the loss and its backward is the same at 5 chunks as at one: each logit's
    exp is computed once. Chunked slice writes became a chain of `slice_scatter`s that inductor fused
    into one kernel evaluating every chunk's branch per element (5 exps a gradient entry at 5 chunks),
    the heaviest kernel of a `small` step on an H200 (docs/benchmarks.md)."""
    from torch._inductor.utils import run_and_get_code

    pred, labels = _ce_batch(torch.float32, seed=6)
    ref_loss, ref_grad = _loss_and_grad(_unchunked_ce, pred, labels)
    exps = {}
    for chunk_rows in (48, 10**6):  # 210 rows: 5 chunks, then one
        torch._dynamo.reset()
        compiled = torch.compile(partial(ao_cross_entropy, vocab_size=CE_VOCAB, chunk_rows=chunk_rows))
        (loss, grad), code = run_and_get_code(_loss_and_grad, compiled, pred, labels)
        exps[chunk_rows] = [c.count("exp(") for c in code]
        assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
        assert ((grad - ref_grad).norm() / ref_grad.norm()).item() <= 1e-6
    assert exps[48] == exps[10**6] and all(n >= 1 for n in exps[48])


def test_chunked_ce_at_the_edges_is_what_cross_entropy_gives():
    """float64 logits, no rows at all, and an ignored row under a non-finite incoming gradient (its
    gradient stays exactly 0, as F.cross_entropy's does)."""
    torch.manual_seed(3)
    pred = torch.randn(7, 70, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 61, (7,))
    labels[2] = IGNORE_INDEX
    ao_cross_entropy(pred, labels, 61, chunk_rows=3).backward()
    ref = pred.detach().clone().requires_grad_()
    F.cross_entropy(ref[:, :61], labels, reduction="sum").backward()
    torch.testing.assert_close(pred.grad[:, :61], ref.grad[:, :61])
    assert torch.equal(pred.grad[:, 61:], torch.zeros(7, 9, dtype=torch.float64))
    empty = torch.zeros(0, 70, requires_grad=True)
    assert float(ao_cross_entropy(empty, torch.zeros(0, dtype=torch.long), 61)) == 0.0
    pred = torch.randn(3, 70, requires_grad=True)
    ao_cross_entropy(pred, torch.tensor([1, IGNORE_INDEX, 2]), 61).backward(torch.tensor(float("inf")))
    assert torch.equal(pred.grad[1], torch.zeros(70))
