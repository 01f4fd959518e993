"""The any-order objective is learnable by this model: trained on random orders, a slot finds the token
it needs by position. Equivalence tests cannot catch a model that computes the right function of the
wrong inputs (an order applied twice, a target that never reaches a block); this task can.

Each sequence is 8 random tokens, each written twice at positions (2k, 2k+1). Read in a uniform random
order, slot j can predict x[sigma(j)] exactly when the partner position sigma(j) xor 1 was read earlier,
and only by matching the target position (adaLN) with the input positions of the context; otherwise
the best it can do is uniform over the vocabulary (log 61 = 4.11 nats).
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.likelihood import token_nll

VOCAB, N = 61, 16


def pair_batch(gen: torch.Generator, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (batch, N // 2), generator=gen).repeat_interleave(2, dim=1)
    order = torch.argsort(torch.rand(batch, N, generator=gen), dim=1)
    return tokens, order


def partner_read_before(order: torch.Tensor) -> torch.Tensor:
    slot_of_position = torch.argsort(order, dim=1)
    return torch.gather(slot_of_position, 1, order ^ 1) < torch.arange(N)


def train_and_score(conditioning: str, steps: int) -> tuple[float, float]:
    model = tiny_model(conditioning, seed=0, vocab_size=VOCAB, max_seq_len=N)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        tokens, order = pair_batch(gen, 32)
        loss = token_nll(model(tokens, order), torch.gather(tokens, 1, order), VOCAB).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokens, order = pair_batch(torch.Generator().manual_seed(123), 256)
    with torch.no_grad():
        nll = token_nll(model(tokens, order), torch.gather(tokens, 1, order), VOCAB)
    seen = partner_read_before(order)
    return float(nll[seen].mean()), float(nll[~seen].mean())


@pytest.mark.parametrize(("conditioning", "steps"), [("adaln", 500), ("concat", 300)])
def test_random_order_training_learns_to_read_context_by_position(one_cpu_thread, conditioning, steps):
    seen, unseen = train_and_score(conditioning, steps)
    assert seen < 0.3, f"{conditioning}: {seen:.3f} nats where the partner was read (untrained: 4.11)"
    assert unseen > math.log(VOCAB) - 0.3, f"{conditioning}: {unseen:.3f} nats without the partner"
