"""Log-likelihood of tokens under an order: the one definition training, validation and evaluation share.

Training minimises `ao_cross_entropy` and everything reported (validation, `aogpt eval`, scorers) uses
`token_nll`: both normalise over the tokenizer's real vocabulary only, so the rows the head is padded
with (`vocab_multiple`) never get probability mass and perplexities are proper distributions over its
tokens. The authors train over all padded classes; for a small vocabulary that keeps the model on the
unigram plateau (tests/model/test_learning.py).
With tokens x (B, n) and an order sigma (B, n), slot j of the model scores x[sigma(j)].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


LOSS_CHUNK_ROWS = 1024
"""Rows of logits the eager training loss turns into float32 at a time: for GPT-2's vocabulary 1024 x 50257
x 4 B = 206 MB, where the whole micro-batch of the small recipe (16 x 1024 rows) would be 3.3 GB. The
compiled loss holds none (_RealVocabCrossEntropy)."""


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
        rows, targets = pred.reshape(-1, pred.shape[-1]), labels.reshape(-1)
        keep = targets != IGNORE_INDEX
        index = torch.where(keep, targets, 0).unsqueeze(1)
        if torch.compiler.is_compiling():
            lse = torch.logsumexp(rows[:, :vocab_size].float(), dim=-1)
        else:
            lse = torch.empty(rows.shape[0], dtype=torch.float32, device=rows.device)
            for start in range(0, rows.shape[0], chunk_rows):
                lse[start : start + chunk_rows] = torch.logsumexp(
                    rows[start : start + chunk_rows, :vocab_size].float(), dim=-1
                )
        picked = rows.gather(1, index).squeeze(1).float()
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
        minus_one = torch.full(
            index.shape, -1.0, dtype=torch.promote_types(pred.dtype, torch.float32), device=index.device
        )
        for start in range(0, rows.shape[0], chunk_rows):
            end = start + chunk_rows
            softmax = torch.sub(rows[start:end, :vocab_size], lse[start:end, None]).exp_()  # float32 (lse is)
            softmax.scatter_add_(1, index[start:end], minus_one[start:end])  # the label entries only
            torch.mul(softmax, scale[start:end], out=grad[start:end, :vocab_size])
        return grad.view_as(pred), None, None, None


def ao_cross_entropy(
    pred: torch.Tensor, labels: torch.Tensor, vocab_size: int, chunk_rows: int = LOSS_CHUNK_ROWS
) -> torch.Tensor:
    """Summed CE over the real vocabulary: the padded logits `pred[..., vocab_size:]` take no part
    (torchtitan divides the sum by the global token count); labels equal to IGNORE_INDEX count nothing,
    every other label must be a real token id (< vocab_size), as the tokenizer's are.

    Float32, whatever `pred`'s dtype, computed `chunk_rows` rows at a time (LOSS_CHUNK_ROWS): the whole
    batch's float32 logits never exist, in the forward or the backward (_RealVocabCrossEntropy)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} must be >= 1")
    return _RealVocabCrossEntropy.apply(pred, labels, vocab_size, chunk_rows)


def token_nll(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """-log p(label) per slot over the real vocabulary (padding rows excluded); float32, shape of `labels`."""
    logp = torch.log_softmax(logits[..., :vocab_size].float(), dim=-1)
    return -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


@torch.inference_mode()
def left_to_right_logp(model, tokens: list[int]) -> torch.Tensor:
    """(n, vocab) float32 log-probabilities of one sequence read left to right: row j is the model's
    distribution of tokens[j] given tokens[:j] (row 0 given the start slot alone), `token_nll`'s numbers
    (the server's echo and logprobs; lm-eval's loglikelihood reads the same)."""
    weight = model.tok_embeddings.weight
    logits = model(torch.tensor([tokens], dtype=torch.long, device=weight.device))
    return torch.log_softmax(logits[0, :, : model.model_args.vocab_size].float(), dim=-1).cpu()


def order_labels(tokens: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """What each slot predicts: x[order[:, j]] (x itself left to right)."""
    return tokens if order is None else torch.gather(tokens, 1, order)


def token_nlls(model, tokens: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """(B, n) NLL in nats of x[order[:, j]] given the earlier slots (order None = left to right)."""
    logits = model(tokens, order=order)
    return token_nll(logits, order_labels(tokens, order), model.model_args.vocab_size)


def other_context_nlls(model, tokens: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """(B, n) NLL of the same targets as `token_nlls` when every slot reads another row's tokens (rows
    rolled by one; B >= 2). Its mean minus token_nlls' is the context gain: how much a model uses what
    its context says, 0 for one that knows only token frequencies and positions."""
    logits = model(tokens.roll(1, 0), order=order)
    return token_nll(logits, order_labels(tokens, order), model.model_args.vocab_size)


def nll_sum_and_count(model, tokens: torch.Tensor, order: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    nll = token_nlls(model, tokens, order)
    return nll.double().sum(), nll.numel()


def slot_nlls(model, tokens: torch.Tensor, order: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """(B,) NLL of x[order[b, slot[b]]] read at slot `slot[b]` only: the head runs on one slot per row.

    `order` may be a prefix (B, L) of a permutation: causal slots never see later ones (AOGPT.hidden)."""
    h, cond = model.hidden(tokens, order)
    rows = torch.arange(h.shape[0], device=h.device)
    logits = model.head(h[rows, slot], None if cond is None else cond[rows, slot])
    labels = tokens[rows, order[rows, slot]]
    return token_nll(logits, labels, model.model_args.vocab_size)


def perplexity(nll: float) -> float:
    """exp(nll), or inf past the largest float exponent (an untrained or broken model can get there)."""
    return math.exp(nll) if nll < math.log(1.7976931348623157e308) else math.inf
