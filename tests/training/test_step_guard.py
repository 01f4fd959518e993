"""The step guard reads nothing on the host inside a training step but at the steps torchtitan logs: its
checks wait on the device (a bad step found at the next read, always before a checkpoint), and a run of the
debug recipe reads device values only at its logging steps."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ROOT, debug_train_args, run_torchrun, tiny_model

from aogpt_plugin.training.step_guard import NonFiniteStepError, StepGuard

COUNTER = str(ROOT / "tests" / "helpers" / "count_host_reads.py")


def _params_after_backward():
    model = tiny_model()
    model(torch.randint(0, 61, (2, 8))).float().mean().backward()
    return list(model.parameters())


class _Tolists:
    """Counts `.tolist()` calls, the guard's one host read."""

    def __enter__(self):
        self.count, self.original = 0, torch.Tensor.tolist

        def counted(t, *args, **kwargs):
            self.count += 1
            return self.original(t, *args, **kwargs)

        torch.Tensor.tolist = counted
        return self

    def __exit__(self, *exc):
        torch.Tensor.tolist = self.original


def test_the_guard_reads_only_at_its_reading_steps_and_names_the_first_bad_step():
    guard, params = StepGuard(), _params_after_backward()
    guard.reads_at = lambda step: step % 5 == 0
    with _Tolists() as reads:
        for step in range(1, 5):
            guard.record(torch.tensor(float("nan") if step == 3 else 2.0))
            guard.check_before_step(params, step)
            guard.check_after_step(params, step)
        assert reads.count == 0 and guard.losses == {}
        guard.record(torch.tensor(2.0))
        with pytest.raises(NonFiniteStepError) as info:
            guard.check_before_step(params, 5)
        assert reads.count == 1
    assert info.value.step == 3 and str(info.value).startswith(
        "step 3: the training loss is NaN/inf; found after step 4"
    )
    assert "no checkpoint was written after step 2" in str(info.value)
    assert sorted(guard.losses) == [1, 2, 3] and guard.losses[1] == (2.0, True)


def test_a_checkpoint_save_reads_the_pending_checks_first():
    """`settle` (what the checkpoint save calls before it writes) raises for a bad step not read yet."""
    guard, params = StepGuard(), _params_after_backward()
    guard.reads_at = lambda step: False
    params[0].grad[0] = float("inf")
    guard.record(torch.tensor(1.0))
    guard.check_before_step(params, 1)
    with pytest.raises(
        NonFiniteStepError, match=r"^step 1: the gradient norm is NaN/inf \(the loss was finite\); found after step 1"
    ):
        guard.settle(1)


def test_a_single_process_stop_is_taken_at_once_without_a_read():
    guard, params = StepGuard(), _params_after_backward()
    guard.reads_at = lambda step: False
    guard.stop.signum = 15  # as the SIGTERM handler sets it
    with _Tolists() as reads:
        guard.check_before_step(params, 4)
    assert guard.stop_step == 4 and reads.count == 0


def _host_reads(tmp_path, name, *flags, **overrides) -> dict:
    out = tmp_path / f"{name}.json"
    args = debug_train_args(tmp_path / name, 7, **{"metrics.log_freq": 3, **overrides})
    proc = run_torchrun([COUNTER, str(out), *flags, "--", *args], module=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="foreach-logits", marks=pytest.mark.slow),  # the fused case runs by default
        pytest.param({"optimizer.implementation": "fused", "aogpt.loss_path": "fused"}, id="fused-fused"),
    ],
)
def test_the_debug_recipe_reads_device_values_only_at_its_logging_steps(tmp_path, overrides):
    """Seven steps of the debug recipe logging every third step (1, 3, 6): every host read of a value a GPU
    holds (`.item()`, `.tolist()`, `.cpu()`, data-dependent shapes: tests/helpers/count_host_reads.py) happens
    in a logging step, none in the four others (the loss, the guard's checks, AdamW's step count, the EMA's
    decay all stay on the device); with checkpoints and validation, which read between steps."""
    run = _host_reads(tmp_path, "run", **overrides)
    reads = {int(step): what for step, what in run["reads"].items()}
    assert run["log_steps"] == [1, 3, 6] and run["steps"] == 7
    assert set(reads) <= {1, 3, 6, 7}, reads  # 7: the last step, which the guard reads too
    assert all(reads.get(step) for step in (1, 3, 6)), reads  # the loss torchtitan logs is seen
    # the case that must fail: one read of the loss in every step
    every = _host_reads(tmp_path, "every", "--read-every-step", **overrides)
    assert {int(step) for step in every["reads"]} == set(range(1, 8))
