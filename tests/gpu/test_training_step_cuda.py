"""The training step's speed paths on CUDA (`pytest -m gpu`; scripts/gpu_check.sh runs them on the lent
machine): the chunked training loss equals F.cross_entropy on bf16 logits, eager and compiled (Triton),
with less peak memory than the whole batch's float32 logits; the head fused with the loss holds none of
the logits; the step profile reads CUDA kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aogpt_plugin.cross_entropy import IGNORE_INDEX, ao_cross_entropy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on the GPU machine)"),
]
VOCAB, PADDED, ROWS, CHUNK = 50257, 50304, 4096, 1024


def _batch():
    g = torch.Generator(device="cuda").manual_seed(0)
    pred = (torch.randn(ROWS, PADDED, generator=g, device="cuda") * 3).bfloat16()
    labels = torch.randint(0, VOCAB, (ROWS,), generator=g, device="cuda")
    labels[:7] = IGNORE_INDEX
    return pred, labels


def _unchunked(pred, labels):
    return F.cross_entropy(pred[:, :VOCAB].float(), labels, reduction="sum", ignore_index=IGNORE_INDEX)


def _loss_grad_and_peak(fn, pred, labels):
    pred = pred.detach().requires_grad_(True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    loss = fn(pred, labels)
    (grad,) = torch.autograd.grad(loss, pred)
    torch.cuda.synchronize()
    return loss.detach(), grad, torch.cuda.max_memory_allocated() - base


@pytest.mark.parametrize("compiled", [False, True])
def test_chunked_loss_on_cuda_equals_cross_entropy_with_less_memory(compiled):
    pred, labels = _batch()
    chunked = lambda p, y: ao_cross_entropy(p, y, VOCAB, CHUNK)  # noqa: E731
    if compiled:
        torch._dynamo.reset()
        chunked = torch.compile(chunked)
        _loss_grad_and_peak(chunked, pred, labels)  # compile first, measure the second call
    ref_loss, ref_grad, ref_peak = _loss_grad_and_peak(_unchunked, pred, labels)
    loss, grad, peak = _loss_grad_and_peak(chunked, pred, labels)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    # bf16 gradients: the same number or one bf16 step apart (relative 2^-7 at most)
    diff = (grad.float() - ref_grad.float()).abs()
    assert (diff <= ref_grad.float().abs() * 2**-7 + 1e-30).float().mean().item() == 1.0
    assert torch.count_nonzero(grad[:, VOCAB:]) == 0
    whole_fp32 = ROWS * VOCAB * 4
    print(f"peak extra memory: chunked {peak / 2**20:.0f} MiB, unchunked {ref_peak / 2**20:.0f} MiB")
    assert ref_peak >= whole_fp32  # the unchunked loss holds the batch's float32 logits
    assert peak < ROWS * PADDED * 2 + 3 * CHUNK * VOCAB * 4  # the bf16 gradient + a few float32 chunks


def test_the_fused_head_on_cuda_is_the_logits_path_without_its_logits():
    """bf16 autocast, GPT-2's head: the fused head + loss gives the logits path's loss and gradients to bf16
    rounding, and its peak memory does not grow with the rows' logits: doubling the rows (4096 -> 8192) adds
    their features' gradient to it, where the logits path adds at least their bf16 logits (412 MB)."""
    from aogpt_plugin.cross_entropy import fused_head_cross_entropy

    g = torch.Generator(device="cuda").manual_seed(1)
    dim = 768
    weight = torch.randn(PADDED, dim, generator=g, device="cuda") * 0.05
    bias = torch.zeros(PADDED, device="cuda")

    def run(fn, rows):
        g.manual_seed(2)
        features = torch.randn(rows, dim, generator=g, device="cuda")
        labels = torch.randint(0, VOCAB, (rows,), generator=g, device="cuda")
        inputs = [t.detach().requires_grad_(True) for t in (features, weight, bias)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn(*inputs, labels)
        grads = torch.autograd.grad(loss, inputs)
        torch.cuda.synchronize()
        return loss.detach(), grads, torch.cuda.max_memory_allocated() - base

    def logits_path(x, w, b, y):
        return ao_cross_entropy(F.linear(x, w, b), y, VOCAB, CHUNK)

    def fused(x, w, b, y):
        return fused_head_cross_entropy(x, w, b, y, VOCAB, CHUNK)

    logits_loss, logits_grads, logits_peak = run(logits_path, ROWS)
    fused_loss, fused_grads, fused_peak = run(fused, ROWS)
    assert fused_loss.item() == pytest.approx(logits_loss.item(), rel=1e-4)
    for grad, ref in zip(fused_grads, logits_grads, strict=True):
        assert ((grad - ref).norm() / ref.norm()).item() <= 2e-2
    logits_growth = run(logits_path, 2 * ROWS)[2] - logits_peak
    fused_growth = run(fused, 2 * ROWS)[2] - fused_peak
    print(
        f"peak extra memory at {ROWS} rows: fused {fused_peak / 2**20:.0f} MiB, logits {logits_peak / 2**20:.0f} MiB;"
    )
    print(f"  {ROWS} more rows add: fused {fused_growth / 2**20:.0f} MiB, logits {logits_growth / 2**20:.0f} MiB")
    assert logits_growth >= ROWS * PADDED * 2  # the added rows' bf16 logits
    assert fused_growth < ROWS * PADDED * 2 / 8 and fused_peak < logits_peak


@pytest.mark.parametrize("compile_scope", [None, "blocks"])
def test_step_profile_reads_cuda_kernels(compile_scope):
    from aogpt_plugin.bench.step_profile import profile_steps
    from aogpt_plugin.bench.train_step import Variant

    device = torch.device("cuda")
    variant = Variant("tiny", "adaln", "uniform", 256, 8, device, torch.bfloat16, compile_scope)
    for _ in range(3):
        variant.step()
    summary = profile_steps(variant.step, device, steps=3)
    cats = summary["categories"]
    print({c: (v["ms_per_step"], v["top"][:1]) for c, v in cats.items()})
    assert summary["timeline"] == "device kernels" and summary["steps"] == 3
    for c in ("matmul", "attention", "loss", "elementwise/norm", "optimizer"):
        assert cats[c]["ms_per_step"] > 0, c
    assert cats["communication"]["ms_per_step"] == 0
    assert summary["busy_ms_per_step"] <= summary["wall_ms_per_step"] + 1e-6
    total = sum(c["ms_per_step"] for c in cats.values()) - summary["overlap_ms_per_step"]
    assert total == pytest.approx(summary["wall_ms_per_step"], rel=1e-3)
