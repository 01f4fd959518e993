"""progress.py: a line at least every ~10 s of training and of each validation, whatever `metrics.log_freq`
is (reported: 74-200 s gaps at log_freq 25, 34 s of silence in a validation), from the host's clock only.
The interval is tested through a fake clock and AOGPT_PROGRESS_SECONDS, never by waiting."""

from __future__ import annotations

import re

import pytest
from conftest import debug_train_args, launch_train

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.training.progress import PROGRESS_SECONDS, Progress, duration, progress_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _steps(every: float, step_seconds: float, steps: int, done: int = 0) -> list[str]:
    clock, lines = Clock(), []
    progress = Progress("step", steps, "steps", done=done, log=lines.append, clock=clock, every=every)
    for step in range(done + 1, steps + 1):
        clock.now += step_seconds
        progress.update(step)
    return lines


def test_a_line_comes_at_the_first_boundary_every_interval_whatever_the_step_time():
    lines = _steps(10, 4.0, 10)  # a step every 4 s: lines after steps 3, 6, 9 (12 s, 24 s, 36 s)
    assert lines == [
        "step 3/10: 0.25 steps/s, 28 s left",
        "step 6/10: 0.25 steps/s, 16 s left",
        "step 9/10: 0.25 steps/s, 4 s left",
    ]
    assert len(_steps(10, 0.5, 100)) == 5  # 50 s of fast steps: every 20th step, not every one
    assert len(_steps(10, 30.0, 3)) == 3  # steps longer than the interval: a line at each
    assert len(_steps(0, 0.5, 5)) == 5  # interval 0 (the tests' setting): every boundary


def test_the_rate_and_time_left_count_from_where_this_process_began():
    """A resumed run (40 of 100 done) at 2 s a step: its own 30 steps' rate, 70 steps left at it."""
    lines = _steps(60, 2.0, 100, done=40)
    assert lines[0] == "step 70/100: 0.5 steps/s, 1 min 0 s left"
    assert lines[-1] == "step 100/100: 0.5 steps/s"  # done: no time left to say


def test_only_rank_0_speaks(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert _steps(0, 1.0, 3) == []


def test_the_interval_comes_from_the_environment_and_a_bad_value_is_one_line():
    assert progress_seconds({}) == PROGRESS_SECONDS == 10
    assert progress_seconds({"AOGPT_PROGRESS_SECONDS": "2.5"}) == 2.5
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(ConfigError, match=rf"AOGPT_PROGRESS_SECONDS='{bad}' is not allowed; allowed: seconds"):
            progress_seconds({"AOGPT_PROGRESS_SECONDS": bad})


def test_durations_read_as_a_clock_would():
    assert [duration(s) for s in (0.4, 12, 98, 3600 * 2 + 5 * 60 + 7)] == ["0 s", "12 s", "1 min 38 s", "2 h 05 min"]


def test_training_and_validation_say_where_they_are_whatever_the_log_freq(tmp_path):
    """A run that logs every 100 steps still says step i/N and validation announces itself (its batches,
    tokens, forward passes, raw and EMA weights) and its batches, here at every boundary (interval 0)."""
    args = debug_train_args(tmp_path / "run", 3, **{"metrics.log_freq": 100, "validation.freq": 2})
    proc = launch_train(args, env={"AOGPT_PROGRESS_SECONDS": "0"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    steps = re.findall(r"INFO - step (\d+)/3: [\d.e+-]+ steps/s", out)
    assert steps == ["1", "2", "3"], out[-3000:]
    announced = "aogpt validation at step 2: 1 batches, 128 tokens per rank, 10 forward passes (raw and EMA weights)"
    assert announced in out
    assert re.findall(r"aogpt validation batch (\d)/2: ", out) == ["1", "2"] * 2  # at step 1 (torchtitan's) and 2
    logged = re.findall(r"(?<!validate )step:\s+(\d+)\s", out)
    assert logged == ["1"], logged  # torchtitan's own lines: the first step only, at log_freq 100
    bad = launch_train(args, env={"AOGPT_PROGRESS_SECONDS": "soon"})  # refused before training
    assert bad.returncode == 2 and bad.stderr.startswith("error: AOGPT_PROGRESS_SECONDS='soon' is not allowed")
