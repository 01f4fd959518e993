"""The AO-GPT optimizer container: authors' weight-decay groups, EMA after each step, NaN guard."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.cpu_support import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

from aogpt_plugin.ema import attach_ema  # noqa: E402
from aogpt_plugin.loss import NonFiniteLossError, StepGuard  # noqa: E402
from aogpt_plugin.optimizer import AOGPTOptimizersContainer  # noqa: E402

KW = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "fused": False, "foreach": True}


def test_weight_decay_only_on_matrices():
    model = tiny_model()
    opt = AOGPTOptimizersContainer([model], torch.optim.AdamW, KW)
    decay, no_decay = opt.optimizers[0].param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    n_params = len(list(model.parameters()))
    assert len(decay["params"]) + len(no_decay["params"]) == n_params
    assert any(p is model.none_embedding for p in decay["params"])  # 2-D like the authors' wnonee


def test_ema_updates_after_every_step():
    model = tiny_model()
    attach_ema(model, decay=0.9)
    opt = AOGPTOptimizersContainer([model], torch.optim.AdamW, KW)
    for _ in range(3):
        model(torch.randint(0, 61, (2, 8))).float().mean().backward()
        opt.step()
        opt.zero_grad()
    assert int(model.ema.num_updates) == 3
    assert not torch.equal(model.ema.output.weight, model.output.weight)


def test_nonfinite_loss_stops_before_the_update():
    model = tiny_model()
    guard = StepGuard()
    opt = AOGPTOptimizersContainer([model], torch.optim.AdamW, KW, guard=guard)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randint(0, 61, (2, 8))).float().mean().backward()
    guard.record(torch.tensor(3.0))
    guard.record(torch.tensor(float("nan")))
    with pytest.raises(NonFiniteLossError, match="non-finite training loss"):
        opt.step()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    guard.record(torch.tensor(2.0))
    opt.step()  # a finite step afterwards goes through
    assert not all(torch.equal(p, before[n]) for n, p in model.named_parameters())
