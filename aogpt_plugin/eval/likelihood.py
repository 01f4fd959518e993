"""Scoring sequences under an order: the NLL primitive shared by validation and `aogpt eval`."""

from __future__ import annotations

import torch

from ..loss import token_nll


def order_labels(tokens: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    return tokens if order is None else torch.gather(tokens, 1, order)


def token_nlls(model, tokens: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """(B, n) NLL in nats of x[order[:, j]] given the earlier slots, real vocabulary only."""
    logits = model(tokens, order=order)
    return token_nll(logits, order_labels(tokens, order), model.model_args.vocab_size)


def nll_sum_and_count(model, tokens, order) -> tuple[torch.Tensor, int]:
    nll = token_nlls(model, tokens, order)
    return nll.double().sum(), nll.numel()
