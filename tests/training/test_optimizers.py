"""The AO-GPT optimizer container: authors' weight-decay groups, EMA after each step, the step guard
before and after it, and the configured learning rate re-applied when a run resumes."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

from aogpt_plugin.training.ema import attach_ema  # noqa: E402
from aogpt_plugin.training.step_guard import NonFiniteStepError, StepGuard  # noqa: E402
from aogpt_plugin.training.titan022.optimizers import AOGPTOptimizersContainer, build_aogpt_lr_schedulers  # noqa: E402

KW = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "fused": False, "foreach": True}


def _backward(model):
    model(torch.randint(0, 61, (2, 8))).float().mean().backward()


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
        _backward(model)
        opt.step()
        opt.zero_grad()
    assert int(model.ema.num_updates) == 3 and opt.steps_done() == 3
    assert not torch.equal(model.ema.output.weight, model.output.weight)


def test_the_ema_starts_at_the_weights_the_optimizer_starts_from_not_at_init_weights():
    """torchtitan builds the optimizers right after `init_weights` and before a checkpoint loads; the
    model's own init never touches the EMA."""
    model = tiny_model()
    attach_ema(model, decay=0.9)
    with torch.no_grad():
        model.output.weight.add_(1.0)
    model.init_weights()
    assert not torch.equal(model.ema.output.weight, model.output.weight)  # init_weights left it alone
    with torch.no_grad():
        model.output.weight.add_(1.0)
    AOGPTOptimizersContainer([model], torch.optim.AdamW, KW)
    assert all(torch.equal(model.ema.get_buffer(n), p) for n, p in model.named_parameters())


def test_the_guard_and_the_ema_run_on_the_step_hooks_before_later_hooks():
    """torchtitan's Trainer registers its float8 post-hook after building the container: it runs after
    the guard has checked the new weights and the EMA has been updated, as before the move to hooks."""
    model = tiny_model()
    attach_ema(model, decay=0.9)
    guard = StepGuard()
    opt = AOGPTOptimizersContainer([model], torch.optim.AdamW, KW, guard=guard)
    seen = []
    opt.register_step_post_hook(lambda *a: seen.append((int(model.ema.num_updates), opt.steps_done())))
    _backward(model)
    guard.record(torch.tensor(2.0))
    opt.step()
    assert seen == [(1, 1)] and guard.losses[1] == (2.0, True)


@pytest.mark.parametrize("fault", ["loss", "gradient"])
def test_a_nonfinite_step_changes_neither_weights_nor_ema(fault):
    model = tiny_model()
    attach_ema(model, decay=0.9)
    guard = StepGuard()
    opt = AOGPTOptimizersContainer([model], torch.optim.AdamW, KW, guard=guard)
    _backward(model)
    guard.record(torch.tensor(2.0))
    opt.step()  # step 1 is fine
    opt.zero_grad()
    before = {k: v.clone() for k, v in model.state_dict().items()}  # weights and EMA shadows
    _backward(model)
    guard.record(torch.tensor(float("nan") if fault == "loss" else 3.0))
    if fault == "gradient":
        model.layers["1"].feed_forward.w1.weight.grad[0, 0] = float("inf")
    with pytest.raises(NonFiniteStepError, match="^step 2: the (training loss|gradient norm) is NaN/inf"):
        opt.step()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    opt.zero_grad()
    _backward(model)
    guard.record(torch.tensor(2.0))
    opt.step()  # a finite step afterwards goes through
    assert not torch.equal(model.output.weight, before["output.weight"])


def test_resuming_applies_the_configured_learning_rate_at_the_resumed_position():
    from torchtitan.config import LRScheduler

    def container(lr):
        return AOGPTOptimizersContainer([tiny_model()], torch.optim.AdamW, {**KW, "lr": lr})

    config = LRScheduler(warmup_steps=2, decay_type="linear")
    first = container(1e-3)
    sched = build_aogpt_lr_schedulers(first, config, training_steps=10)
    for _ in range(4):
        first.step()
        sched.step()
    resumed = container(5e-3)  # the user asks for a new peak learning rate
    resumed_sched = build_aogpt_lr_schedulers(resumed, config, training_steps=10)
    resumed_sched.load_state_dict(sched.state_dict())
    old = [g["lr"] for g in first.optimizers[0].param_groups]
    new = [g["lr"] for g in resumed.optimizers[0].param_groups]
    assert new == pytest.approx([5 * x for x in old])  # same point of the schedule, the new peak
    resumed_sched.step()
    sched.step()
    assert resumed.optimizers[0].param_groups[0]["lr"] == pytest.approx(5 * first.optimizers[0].param_groups[0]["lr"])


def test_preflight_and_the_builder_share_one_optimizer_name_rule():
    from types import SimpleNamespace

    from aogpt_plugin.errors import ConfigError
    from aogpt_plugin.training.optimizers import check_optimizer_name
    from aogpt_plugin.training.titan022.optimizers import build_aogpt_optimizers

    message = "optimizer.name='SGD' is not supported; allowed: Adam, AdamW"
    config = SimpleNamespace(name="SGD", early_step_in_backward=False)
    for check in (lambda: check_optimizer_name("SGD"), lambda: build_aogpt_optimizers([], config, None, guard=None)):
        with pytest.raises(ConfigError) as info:
            check()
        assert str(info.value) == message
    check_optimizer_name("AdamW")


def test_early_step_in_backward_and_fault_tolerance_need_the_ema_off_one_rule():
    from aogpt_plugin.errors import ConfigError
    from aogpt_plugin.training.optimizers import check_ema_compatible

    with pytest.raises(ConfigError, match=r"optimizer.early_step_in_backward=true builds torchtitan's own optim"):
        check_ema_compatible(True, False, True)
    with pytest.raises(ConfigError, match="fault tolerance builds torchtitan's own optimizers"):
        check_ema_compatible(False, True, True)
    check_ema_compatible(True, True, False)  # no EMA: nothing to keep updated
    check_ema_compatible(False, False, True)
