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


def final_hidden(model, tokens: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`model.forward` without the head, for an order prefix (see `AOGPT.hidden`)."""
    return model.hidden(tokens, order)


def slot_nlls(model, tokens: torch.Tensor, order: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """(B,) NLL of x[order[b, slot[b]]] read at slot `slot[b]` only: the head runs on one slot per row."""
    h, cond = final_hidden(model, tokens, order)
    rows = torch.arange(h.shape[0], device=h.device)
    logits = model.head(h[rows, slot], None if cond is None else cond[rows, slot])
    labels = tokens[rows, order[rows, slot]]
    return token_nll(logits, labels, model.model_args.vocab_size)
