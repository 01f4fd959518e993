"""The step guard: a NaN/inf loss, gradient or updated weight stops a step before anything is written,
and a checkpoint with NaN/inf weights is refused by name when it is loaded."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.ema import attach_ema
from aogpt_plugin.errors import UserError
from aogpt_plugin.loss import NonFiniteStepError, StepGuard, nonfinite_count, refuse_nonfinite_load


def _backward(model):
    model(torch.randint(0, 61, (2, 8))).float().mean().backward()
    return [p for p in model.parameters()]


def test_nonfinite_count_sees_nan_and_inf_in_any_tensor():
    assert nonfinite_count([torch.ones(3), torch.zeros(2)]).item() == 0
    assert nonfinite_count([torch.ones(3), torch.tensor([1.0, float("inf")])]).item() == 1
    assert nonfinite_count([torch.tensor([float("nan")]), torch.tensor([-float("inf")])]).item() == 2


def test_a_finite_step_passes():
    guard, params = StepGuard(), _backward(tiny_model())
    guard.record(torch.tensor(3.0))
    guard.check_before_step(params, step=1)
    guard.check_after_step(params, step=1)


def test_a_nonfinite_loss_in_any_microbatch_stops_the_step():
    guard, params = StepGuard(), _backward(tiny_model())
    guard.record(torch.tensor(3.0))
    guard.record(torch.tensor(float("inf")))
    with pytest.raises(NonFiniteStepError, match="step 7: the training loss is NaN/inf; stopped before") as info:
        guard.check_before_step(params, step=7)
    assert "no weight, EMA or checkpoint was written after step 6" in str(info.value)
    guard.check_before_step(params, step=8)  # the record is per step


def test_a_nonfinite_gradient_with_a_finite_loss_stops_the_step():
    """The reported fault: the loss was finite, the gradient norm was not, and AdamW wrote NaN everywhere."""
    guard, params = StepGuard(), _backward(tiny_model())
    params[3].grad[0] = float("nan")
    guard.record(torch.tensor(2.0))
    with pytest.raises(NonFiniteStepError, match="step 3: the gradient norm is NaN/inf \\(the loss was finite\\)"):
        guard.check_before_step(params, step=3)


def test_weights_made_nonfinite_by_the_update_stop_the_run():
    guard, model = StepGuard(), tiny_model()
    with torch.no_grad():
        model.output.bias[0] = float("inf")
    with pytest.raises(NonFiniteStepError, match="the optimizer step made weights NaN/inf"):
        guard.check_after_step(list(model.parameters()), step=2)


def test_a_disabled_guard_checks_nothing():
    guard, params = StepGuard(), _backward(tiny_model())
    guard.enabled = False
    params[0].grad.fill_(float("nan"))
    guard.record(torch.tensor(float("nan")))
    guard.check_before_step(params, step=1)


def test_loading_nonfinite_weights_or_ema_is_refused_by_name():
    source = tiny_model()
    attach_ema(source, decay=0.9)
    target = tiny_model(seed=1)
    attach_ema(target, decay=0.9)
    target.register_load_state_dict_post_hook(refuse_nonfinite_load)
    target.load_state_dict(source.state_dict())  # finite: fine
    state = source.state_dict()
    state["ema.layers.0.attention.wo.weight"][1, 2] = float("nan")
    with pytest.raises(UserError, match="holds NaN/inf values in tensor 'ema.layers.0.attention.wo.weight'"):
        target.load_state_dict(state)
