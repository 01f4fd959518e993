"""The training cross-entropy over the real vocabulary, on the head's logits or fused with the head.

Both normalise over the tokenizer's real vocabulary only (the head's rows padded to `vocab_multiple` get
no mass, as likelihood.py's scoring does) and sum over the labels that are not IGNORE_INDEX; torchtitan
divides the sum by the global token count. Two paths compute the same loss and gradients:

  logits - `ao_cross_entropy(logits, labels, vocab_size)`: the head writes the micro-batch's logits and
           the loss reads them, `chunk_rows` rows at a time in float32;
  fused  - `fused_head_cross_entropy(features, weight, bias, labels, vocab_size)`: the head's GEMM runs
           `chunk_rows` rows at a time inside the loss (llm.c's fused classifier, Liger's fused linear
           cross-entropy), so no logits tensor of the micro-batch exists; `AOGPT.forward(..., labels=)`
           takes it.

Float32 at least (float64 stays float64), whatever the logits' dtype. Below the model (model.py imports
it), so the exported modeling file carries it too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100

LOSS_CHUNK_ROWS = 1024
"""Rows of logits either path holds in float32 at a time: for GPT-2's vocabulary 1024 x 50257 x 4 B = 206 MB,
where the whole micro-batch of the small recipe (16 x 1024 rows) would be 3.3 GB. The compiled logits path
holds none (_RealVocabCrossEntropy)."""


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """What the loss computes in: float32, or float64 for float64 logits."""
    return torch.promote_types(dtype, torch.float32)


def _keep_and_index(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows scored (N,), label column per row (N, 1), 0 where ignored) of labels of any shape."""
    targets = labels.reshape(-1)
    keep = targets != IGNORE_INDEX
    return keep, torch.where(keep, targets, 0).unsqueeze(1)


class _RealVocabCrossEntropy(torch.autograd.Function):
    """Summed CE over the first `vocab_size` logits of each row, `chunk_rows` rows at a time (eager).

    Forward keeps one float32 log-sum-exp per row; backward recomputes each chunk's softmax from the
    saved logits and writes it straight into the gradient (padded columns and ignored rows zero), so
    neither pass holds more than one chunk of float32 logits besides the logits themselves; the scatter
    touches only the label entries. Compiled, both passes are one expression over all rows (a dense
    one-hot, the padding by `F.pad`), which inductor fuses into one kernel each that holds no float32
    logits at all. Chunks there would cost: their slice writes become a chain of `slice_scatter`s that
    inductor fuses into one kernel evaluating every chunk's branch per element (16 exps per gradient
    entry at 16 chunks: the heaviest kernel of a `small` training step on an H200, docs/benchmarks.md)."""

    @staticmethod
    def forward(ctx, pred: torch.Tensor, labels: torch.Tensor, vocab_size: int, chunk_rows: int) -> torch.Tensor:
        rows = pred.reshape(-1, pred.shape[-1])
        keep, index = _keep_and_index(labels)
        acc = _accumulation_dtype(pred.dtype)
        if torch.compiler.is_compiling():
            lse = torch.logsumexp(rows[:, :vocab_size].to(acc), dim=-1)
        else:
            lse = torch.empty(rows.shape[0], dtype=acc, device=rows.device)
            for start in range(0, rows.shape[0], chunk_rows):
                lse[start : start + chunk_rows] = torch.logsumexp(
                    rows[start : start + chunk_rows, :vocab_size].to(acc), dim=-1
                )
        picked = rows.gather(1, index).squeeze(1).to(acc)
        ctx.save_for_backward(pred, index, keep, lse)
        ctx.vocab_size, ctx.chunk_rows = vocab_size, chunk_rows
        return torch.where(keep, lse - picked, 0.0).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        pred, index, keep, lse = ctx.saved_tensors
        vocab_size, chunk_rows = ctx.vocab_size, ctx.chunk_rows
        rows = pred.reshape(-1, pred.shape[-1])
        scale = torch.where(keep, grad_loss, 0.0).unsqueeze(1)  # exactly 0 for ignored rows, whatever grad_loss is
        if torch.compiler.is_compiling():  # elementwise only: one fused pass, logits in, gradient out
            columns = torch.arange(vocab_size, device=index.device).unsqueeze(0)
            softmax = torch.sub(rows[:, :vocab_size], lse[:, None]).exp()  # float32 (lse is)
            real = (softmax - (columns == index).to(softmax.dtype)) * scale
            grad = F.pad(real, (0, rows.shape[1] - vocab_size)).to(pred.dtype)
            return grad.view_as(pred), None, None, None
        grad = torch.empty_like(rows)
        grad[:, vocab_size:] = 0
        minus_one = torch.full(index.shape, -1.0, dtype=lse.dtype, device=index.device)
        for start in range(0, rows.shape[0], chunk_rows):
            end = start + chunk_rows
            softmax = torch.sub(rows[start:end, :vocab_size], lse[start:end, None]).exp_()  # float32 (lse is)
            softmax.scatter_add_(1, index[start:end], minus_one[start:end])  # the label entries only
            torch.mul(softmax, scale[start:end], out=grad[start:end, :vocab_size])
        return grad.view_as(pred), None, None, None


def _check_chunk_rows(chunk_rows: int) -> None:
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} must be >= 1")


def ao_cross_entropy(
    pred: torch.Tensor, labels: torch.Tensor, vocab_size: int, chunk_rows: int = LOSS_CHUNK_ROWS
) -> torch.Tensor:
    """Summed CE over the real vocabulary: the padded logits `pred[..., vocab_size:]` take no part
    (torchtitan divides the sum by the global token count); labels equal to IGNORE_INDEX count nothing,
    every other label must be a real token id (< vocab_size), as the tokenizer's are.

    Float32, whatever `pred`'s dtype, computed `chunk_rows` rows at a time (LOSS_CHUNK_ROWS): the whole
    batch's float32 logits never exist, in the forward or the backward (_RealVocabCrossEntropy)."""
    _check_chunk_rows(chunk_rows)
    return _RealVocabCrossEntropy.apply(pred, labels, vocab_size, chunk_rows)


def _chunk_loss_and_gradient(
    logits: torch.Tensor, index: torch.Tensor, keep: torch.Tensor, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk's summed CE and its gradient with respect to its logits (softmax - one-hot over the real
    vocabulary; padded columns and ignored rows 0), both in the accumulation dtype; the gradient buffer is
    the only one of the chunk's size besides the logits."""
    grad = torch.empty(logits.shape, dtype=_accumulation_dtype(logits.dtype), device=logits.device)
    grad[:, vocab_size:] = 0
    real = grad[:, :vocab_size]
    real.copy_(logits[:, :vocab_size])
    lse = torch.logsumexp(real, dim=-1)
    loss = torch.where(keep, lse - real.gather(1, index).squeeze(1), 0.0).sum()
    real.sub_(lse.unsqueeze(1)).exp_()
    real.scatter_add_(1, index, torch.full(index.shape, -1.0, dtype=grad.dtype, device=grad.device))
    real.mul_(keep.unsqueeze(1))
    return loss, grad


class _FusedHeadCrossEntropy(torch.autograd.Function):
    """Summed CE over the real vocabulary of the logits `features @ weight.T + bias`, which never exist whole.

    `chunk_rows` rows at a time the head's GEMM makes their logits, the loss takes its log-sum-exp, and the
    chunk's gradient (softmax - one-hot) goes at once through the head's two gradient GEMMs: the forward
    computes the gradients of the features, the weight and the bias, and the backward only scales them by
    the loss's gradient, so nothing is recomputed (the GEMMs are the logits path's three) and no pass holds
    more than one chunk of logits. The GEMMs run as the logits path's do: in autocast's dtype under
    autocast, the gradient GEMMs on the gradient rounded to the logits' dtype; the weight's and bias's
    gradients add up over the chunks in float32 (float64 for float64)."""

    @staticmethod
    def forward(
        ctx,
        features: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        vocab_size: int,
        chunk_rows: int,
    ) -> torch.Tensor:
        rows = features.reshape(-1, features.shape[-1])
        keep, index = _keep_and_index(labels)
        want_rows, want_weight, want_bias = ctx.needs_input_grad[:3]
        acc = _accumulation_dtype(weight.dtype)
        grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=acc, device=bias.device) if want_bias else None
        losses, grad_rows = [], []
        for start in range(0, rows.shape[0], chunk_rows):
            end = start + chunk_rows
            x = rows[start:end]
            logits = F.linear(x, weight, bias)
            loss, grad_logits = _chunk_loss_and_gradient(logits, index[start:end], keep[start:end], vocab_size)
            losses.append(loss)
            g = grad_logits.to(logits.dtype)
            if want_rows:
                grad_rows.append(torch.mm(g, weight).to(features.dtype))
            if want_weight:
                grad_weight.add_(torch.mm(g.t(), x))
            if want_bias:
                grad_bias.add_(g.sum(0))
        if not losses:  # no rows
            losses.append(torch.zeros((), dtype=_accumulation_dtype(features.dtype), device=features.device))
            grad_rows.append(torch.zeros_like(rows))
        grad_features = torch.cat(grad_rows).view_as(features) if want_rows else None
        ctx.save_for_backward(grad_features, grad_weight, grad_bias)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return torch.stack(losses).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        grad_features, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        scaled = lambda grad, dtype: None if grad is None else (grad * grad_loss).to(dtype)  # noqa: E731
        features = None if grad_features is None else scaled(grad_features, grad_features.dtype)
        return features, scaled(grad_weight, weight_dtype), scaled(grad_bias, bias_dtype), None, None, None


def fused_head_cross_entropy(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    vocab_size: int,
    chunk_rows: int = LOSS_CHUNK_ROWS,
) -> torch.Tensor:
    """`ao_cross_entropy(F.linear(features, weight, bias), labels, vocab_size)` without the logits tensor:
    the head (`weight` (padded vocabulary, dim), `bias` or None) and the loss run together `chunk_rows` rows
    at a time (_FusedHeadCrossEntropy). `features` (..., dim): the head's input, `labels` its shape but the
    last dimension. Equal loss and gradients up to rounding."""
    _check_chunk_rows(chunk_rows)
    return _FusedHeadCrossEntropy.apply(features, weight, bias, labels, vocab_size, chunk_rows)
