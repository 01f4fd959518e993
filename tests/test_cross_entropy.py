"""The training cross-entropy over the real vocabulary: on the logits (ao_cross_entropy, chunked over rows)
and fused with the head (fused_head_cross_entropy, no logits tensor), against F.cross_entropy and each other."""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from aogpt_plugin.cross_entropy import IGNORE_INDEX, LOSS_CHUNK_ROWS, ao_cross_entropy, fused_head_cross_entropy

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


# ---- the head fused with the loss (fused_head_cross_entropy): no logits tensor --------------------------------

HEAD_DIM = 24


def _head_batch(dtype: torch.dtype, seed: int = 0, bias: bool = True):
    """Head inputs (3, 70, dim), an untied head's weight (padded vocabulary, dim) and bias (None: tied), labels."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 70, HEAD_DIM, generator=g, dtype=dtype)
    weight = torch.randn(CE_PADDED, HEAD_DIM, generator=g, dtype=dtype) * 0.7
    head_bias = torch.randn(CE_PADDED, generator=g, dtype=dtype) if bias else None
    labels = torch.randint(0, CE_VOCAB, (3, 70), generator=g)
    labels[0, :9] = IGNORE_INDEX
    labels[2, 40] = IGNORE_INDEX
    return features, weight, head_bias, labels


def _head_loss_and_grads(fn, features, weight, bias, labels):
    inputs = [t.detach().requires_grad_(True) for t in (features, weight) + ((bias,) if bias is not None else ())]
    loss = fn(*inputs[:2], inputs[2] if bias is not None else None, labels)
    return loss.detach(), torch.autograd.grad(loss, inputs)


def _logits_path(features, weight, bias, labels, chunk_rows=LOSS_CHUNK_ROWS):
    return ao_cross_entropy(F.linear(features, weight, bias), labels, CE_VOCAB, chunk_rows)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("bias", [True, False], ids=["untied", "tied"])
@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 210, 10**6])
def test_the_fused_head_gives_the_logits_paths_loss_and_gradients_in_float64(chunk_rows, bias):
    """float64: the loss and the gradients of the features, the weight and the bias to 1e-12 relative."""
    batch = _head_batch(torch.float64, seed=1, bias=bias)
    ref_loss, ref_grads = _head_loss_and_grads(_logits_path, *batch)
    fused = lambda x, w, b, y: fused_head_cross_entropy(x, w, b, y, CE_VOCAB, chunk_rows)  # noqa: E731
    loss, grads = _head_loss_and_grads(fused, *batch)
    assert loss.dtype == torch.float64 and abs(loss.item() - ref_loss.item()) <= 1e-12 * abs(ref_loss.item())
    assert len(grads) == len(ref_grads) == (3 if bias else 2)
    for grad, ref in zip(grads, ref_grads, strict=True):
        assert grad.dtype == torch.float64 and _relative(grad, ref) <= 1e-12
    assert torch.count_nonzero(grads[1][CE_VOCAB:]) == 0  # the padded head rows take no part
    assert torch.count_nonzero(grads[0][0, :9]) == 0  # nor do ignored labels
    # a case the comparison must catch: the padded rows taking mass
    padded = F.cross_entropy(F.linear(*batch[:3]).flatten(0, 1), batch[3].flatten(), reduction="sum")
    assert abs(padded.item() - loss.item()) > 1e-3 * abs(loss.item())


def test_the_fused_head_gives_the_logits_paths_loss_and_gradients_in_float32():
    batch = _head_batch(torch.float32, seed=2)
    ref_loss, ref_grads = _head_loss_and_grads(_logits_path, *batch)
    fused = lambda x, w, b, y: fused_head_cross_entropy(x, w, b, y, CE_VOCAB, 32)  # noqa: E731
    loss, grads = _head_loss_and_grads(fused, *batch)
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    for grad, ref in zip(grads, ref_grads, strict=True):
        assert grad.dtype == torch.float32 and _relative(grad, ref) <= 1e-5


def test_the_fused_head_under_bfloat16_autocast_is_the_logits_path_to_bfloat16_rounding():
    """Autocast: the head's GEMMs in bf16 on both paths; the fused path adds the chunks' weight gradients in
    float32 where the logits path's one GEMM rounds the whole sum to bf16 once."""
    batch = _head_batch(torch.float32, seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss, ref_grads = _head_loss_and_grads(_logits_path, *batch)
        fused = lambda x, w, b, y: fused_head_cross_entropy(x, w, b, y, CE_VOCAB, 32)  # noqa: E731
        loss, grads = _head_loss_and_grads(fused, *batch)
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    for grad, ref in zip(grads, ref_grads, strict=True):
        assert grad.dtype == ref.dtype == torch.float32 and _relative(grad, ref) <= 1e-2


def _largest_tensor_of_loss_and_backward(fn, *inputs) -> int:
    """The most elements any op makes (a dtype-blind record) while `fn(*inputs)` and its backward run."""

    class Largest(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    Largest.largest = max(Largest.largest, t.numel())
            return out

    with Largest():
        fn(*inputs).backward()
    return Largest.largest


def test_the_fused_head_never_holds_more_than_a_chunk_of_logits():
    """The loss's memory, pinned: no op of the fused path's forward or backward makes a tensor larger than one
    chunk of logits (32 x 512), the head's weight or the features; the logits path makes the micro-batch's
    logits (210 x 512), the case that must fail."""
    features, weight, bias, labels = (t.requires_grad_(t.is_floating_point()) for t in _head_batch(torch.float32, 4))
    largest_input = max(weight.numel(), features.numel())
    fused = _largest_tensor_of_loss_and_backward(
        lambda x, w, b: fused_head_cross_entropy(x, w, b, labels, CE_VOCAB, 32), features, weight, bias
    )
    assert fused <= max(32 * CE_PADDED, largest_input)
    unfused = _largest_tensor_of_loss_and_backward(
        lambda x, w, b: _logits_path(x, w, b, labels, 32), features, weight, bias
    )
    assert unfused >= labels.numel() * CE_PADDED


def test_the_fused_head_at_the_edges():
    """No rows at all; every label ignored; an ignored row under a non-finite incoming gradient stays 0."""
    features, weight, bias, labels = _head_batch(torch.float64, seed=5)
    empty = torch.zeros(0, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    loss = fused_head_cross_entropy(empty, weight, bias, torch.zeros(0, dtype=torch.long), CE_VOCAB)
    assert loss.item() == 0.0
    x = features.detach().requires_grad_(True)
    loss = fused_head_cross_entropy(x, weight, bias, torch.full_like(labels, IGNORE_INDEX), CE_VOCAB, 16)
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(x.grad) == 0
    with pytest.raises(ValueError, match="chunk_rows=0 must be >= 1"):
        fused_head_cross_entropy(features, weight, bias, labels, CE_VOCAB, 0)
