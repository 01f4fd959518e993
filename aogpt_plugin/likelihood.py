"""Log-likelihood of tokens under an order: the one definition training, validation and evaluation share.

Training minimises cross_entropy.py's loss and everything reported (validation, `aogpt eval`, scorers) uses
`token_nll`: both normalise over the tokenizer's real vocabulary only, so the rows the head is padded
with (`vocab_multiple`) never get probability mass and perplexities are proper distributions over its
tokens. The authors train over all padded classes; for a small vocabulary that keeps the model on the
unigram plateau (tests/model/test_learning.py).
With tokens x (B, n) and an order sigma (B, n), slot j of the model scores x[sigma(j)].
"""

from __future__ import annotations

import math

import torch


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
    h, _ = model.hidden(tokens, order)
    rows = torch.arange(h.shape[0], device=h.device)
    targets = order[rows, slot]
    logits = model.head(h[rows, slot], model.condition(targets, positions=tokens.shape[1]))
    labels = tokens[rows, targets]
    return token_nll(logits, labels, model.model_args.vocab_size)


def perplexity(nll: float) -> float:
    """exp(nll), or inf past the largest float exponent (an untrained or broken model can get there)."""
    return math.exp(nll) if nll < math.log(1.7976931348623157e308) else math.inf
