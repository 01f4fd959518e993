"""What a short CPU training run prints and writes: no known noise, no MFU, a real validation tps."""

from __future__ import annotations

import glob
import re

import pytest
from conftest import debug_train_args, launch_train

NOISE = (
    "torchtitan version",  # torchtitan's own version line
    "with {",  # torchtitan's "Building aogpt debugmodelwith {" + a JSON dump of the model args
    '"dim": 64',
    "Failed to load",  # torchao's CUDA kernels, absent on a CPU
    "Detected no triton",  # torchao, on a CPU
    "is an Enum subclass",  # torch's pytree deprecation, at the torchao import
)


def test_a_short_cpu_run_prints_no_known_noise_no_mfu_and_a_measured_validation_tps(tmp_path):
    dump = tmp_path / "run"
    # the float8 converter (emulated on CPU) imports torchao, which is where half the noise came from;
    # the recipe's 10 warm-up steps over 4 keep a real warning to show that warnings still get through
    args = debug_train_args(dump, 4, **{"lr_scheduler.warmup_steps": None, "validation.freq": 2})
    proc = launch_train(args + ["--model.converters", "quantize.linear.float8", "--quantize.linear.float8.emulate"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert [s for s in NOISE if s in out] == [], out[:4000]
    assert "Building aogpt debugmodel: dim=64, n_layers=2" in out  # one clean line instead
    assert "WARNING - Warmup steps (10) exceed total steps (4)" in out  # real warnings stay
    assert "step:  4" in out and "tflops: " in out and "mfu" not in out.lower().replace("no mfu", "")
    validation_tps = [int(t.replace(",", "")) for t in re.findall(r"validate step: .* tps: ([\d,]+)", out)]
    assert len(validation_tps) == 3 and min(validation_tps) > 0, out[-3000:]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = glob.glob(str(dump / "tb" / "*"))
    acc = EventAccumulator(events)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert "mfu(%)" not in tags and "tflops" in tags  # no MFU on a CPU
    assert [e.step for e in acc.Scalars("validation_metrics/throughput(tps)")] == [
        1,
        2,
        4,
    ]  # torchtitan also validates at step 1
    assert min(e.value for e in acc.Scalars("validation_metrics/throughput(tps)")) > 0
    # the training tps after a validation still counts its tokens over training time only
    assert all(e.value > 0 for e in acc.Scalars("throughput(tps)"))


@pytest.mark.parametrize(
    "world,env,expected",
    [
        (1, {}, "python -m aogpt_plugin.train"),
        (1, {"AOGPT_TRAIN_COMMAND": "aogpt train"}, "aogpt train"),  # as `aogpt train` starts it
        (2, {"LOCAL_WORLD_SIZE": "2"}, "torchrun --nproc_per_node=2 -m aogpt_plugin.train"),
        (
            64,
            {"LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "gpu01", "MASTER_PORT": "29500"},
            "torchrun --nnodes=8 --nproc_per_node=8 --rdzv_backend c10d --rdzv_endpoint gpu01:29500 -m aogpt_plugin.train",
        ),
    ],
)
def test_the_printed_command_names_how_the_run_was_started(world, env, expected):
    """A resume line on 8 nodes x 8 GPUs is per node (not --nproc_per_node=64 on one); one started by
    `aogpt train` says `aogpt train`."""
    from aogpt_plugin.training.launcher import program

    assert program(world, env) == expected
