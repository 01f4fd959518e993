"""Training under torchtitan 0.3 through `python -m aogpt_plugin.train` and stock `-m torchtitan.train`:
0.2.2's losses through both, exact resume on two FSDP ranks, the checkpoint record, `aogpt convert`,
and checkpoints moving between versions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, debug_train_args, error_lines, gpt2_start_args, launch_train, recorded_losses, run_torchrun

from .conftest import needs_titan03, printed_losses

pytestmark = needs_titan03
VENV022 = Path(os.environ.get("AOGPT_PYTHON022", ROOT / ".venv" / "bin" / "python"))


def _validation(proc, step: int = 6) -> list[str]:
    """The validation metrics line of `step` (raw and EMA weights)."""
    marker = f"aogpt validation step {step}: "
    return [ln.split(marker)[1] for ln in (proc.stdout + proc.stderr).splitlines() if marker in ln]


def _args(dump: Path, steps: int, **extra) -> list[str]:
    return debug_train_args(dump, steps, **{"checkpoint.interval": 3, "validation.freq": steps, **extra})


@pytest.mark.slow
def test_two_fsdp_processes_resume_exactly(tmp_path):
    dump = tmp_path / "run"
    full = run_torchrun(["aogpt_plugin.train", *_args(dump, 6)], nproc=2)
    assert full.returncode == 0, full.stderr[-3000:]
    first = printed_losses(full.stdout + full.stderr)
    recorded = recorded_losses(dump)
    assert sorted(first) == sorted(recorded) == list(range(1, 7))
    record = json.loads((dump / "checkpoint" / "step-6" / "aogpt.json").read_text())
    assert record["torchtitan"].startswith("0.3") and record["step"] == 6
    shutil.rmtree(dump / "checkpoint" / "step-6")
    resumed = run_torchrun(["aogpt_plugin.train", *_args(dump, 6)], nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = printed_losses(resumed.stdout + resumed.stderr)
    assert sorted(again) == [4, 5, 6]
    assert {s: first[s] for s in (4, 5, 6)} == again
    after = recorded_losses(dump)  # the new step-6 record: the resumed run's losses, full precision
    assert {s: recorded[s] for s in (4, 5, 6)} == {s: after[s] for s in (4, 5, 6)}
    val, val_again = _validation(full), _validation(resumed)
    assert val and val == val_again  # EMA included: its state resumed too


@pytest.mark.slow
def test_two_processes_train_alike_through_stock_torchrun(tmp_path):
    """`torchrun --nproc_per_node=2 -m torchtitan.train --module aogpt_plugin --config aogpt_debug` with the
    launcher's options in 0.3's names (recipe.translate_cli) prints the launcher's losses and validation."""
    from aogpt_plugin.training.titan03.recipe import translate_cli

    launcher = run_torchrun(["aogpt_plugin.train", *_args(tmp_path / "launcher", 4)], nproc=2)
    assert launcher.returncode == 0, launcher.stderr[-3000:]
    special, options = translate_cli(_args(tmp_path / "stock", 4))
    assert special == {"job.config_file": "train_configs/aogpt_debug.toml"}
    stock = run_torchrun(["torchtitan.train", "--module", "aogpt_plugin", "--config", "aogpt_debug", *options], nproc=2)
    assert stock.returncode == 0, stock.stderr[-3000:]
    losses = printed_losses(launcher.stdout + launcher.stderr)
    assert sorted(losses) == [1, 2, 3, 4] and printed_losses(stock.stdout + stock.stderr) == losses
    val = _validation(launcher, 4)
    assert val and set(_validation(stock, 4)) == set(val)  # stock: every rank logs


def _convert(dump: Path, out: Path, weights: str):
    from aogpt_plugin.convert import convert

    return convert(str(dump / "checkpoint"), str(out), weights=weights)


def test_convert_gives_the_model_folder_0_2_2_gives(tmp_path):
    """Same seed, same steps: the two versions' checkpoints convert to byte-identical weights and the
    same config.json (the torchtitan 0.2.2 run needs its venv: AOGPT_PYTHON022 or .venv)."""
    from aogpt_plugin.model_dir import load_model_dir

    dump03 = tmp_path / "run03"
    proc = launch_train(_args(dump03, 2, **{"checkpoint.interval": 2}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = {}
    for weights in ("raw", "ema"):
        cfg = _convert(dump03, tmp_path / f"m03_{weights}", weights)
        assert cfg.step == 2 and cfg.weights == weights
        folders[weights] = load_model_dir(str(tmp_path / f"m03_{weights}"))
    assert not torch.equal(folders["raw"].model.output.weight, folders["ema"].model.output.weight)
    if not VENV022.exists():
        pytest.skip(f"no torchtitan 0.2.2 python at {VENV022} to compare with")
    dump022 = tmp_path / "run022"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [str(VENV022), "-m", "aogpt_plugin.train", *_args(dump022, 2, **{"checkpoint.interval": 2})]
    old = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert old.returncode == 0, old.stderr[-3000:]
    assert printed_losses(old.stdout + old.stderr) == printed_losses(proc.stdout + proc.stderr)
    for weights in ("raw", "ema"):
        _convert(dump022, tmp_path / f"m022_{weights}", weights)
        a, b = tmp_path / f"m03_{weights}", tmp_path / f"m022_{weights}"
        assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
        assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
        config_a, config_b = (json.loads((d / "config.json").read_text()) for d in (a, b))
        assert config_a.pop("source").endswith("run03/checkpoint/step-2")  # where each was converted from
        assert config_b.pop("source").endswith("run022/checkpoint/step-2")
        assert config_a == config_b


def test_checkpoints_move_from_0_2_2_to_0_3_only(tmp_path):
    """A 0.2.2 checkpoint resumes under 0.3; a 0.3 one is refused by 0.2.2 in one line (0.3 saves
    only the scheduler's last_epoch, which 0.2.2 cannot load)."""
    if not VENV022.exists():
        pytest.skip(f"no torchtitan 0.2.2 python at {VENV022}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    dump = tmp_path / "run"
    cmd = [str(VENV022), "-m", "aogpt_plugin.train", *_args(dump, 2, **{"checkpoint.interval": 2})]
    old = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert old.returncode == 0, old.stderr[-3000:]
    proc = launch_train(_args(dump, 4, **{"checkpoint.interval": 2}))  # 0.3 resumes step 2, saves step 4
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(printed_losses(proc.stdout + proc.stderr)) == [3, 4]
    cmd = [str(VENV022), "-m", "aogpt_plugin.train", *_args(dump, 6, **{"checkpoint.interval": 2})]
    back = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert back.returncode == 2
    (line,) = error_lines(back)
    assert "written by torchtitan 0.3.0" in line and "step-4" in line, line


# The debug recipe's first 8 losses under torchtitan 0.2.2 (.venv, torch 2.13.0, one process):
#   python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml --training.steps 8 \
#       --metrics.log_freq 1 --debug.seed 7 --metrics.disable_color_printing --job.dump_folder D
DEBUG_LOSSES_0_2_2 = {
    1: "10.83492", 2: "10.83815", 3: "10.82371", 4: "10.82710",
    5: "10.80708", 6: "10.78901", 7: "10.75271", 8: "10.68272",
}  # fmt: skip
EIGHT_STEPS = [
    "--training.steps",
    "8",
    "--metrics.log_freq",
    "1",
    "--debug.seed",
    "7",
    "--metrics.disable_color_printing",
]


def test_debug_recipe_gives_0_2_2_losses_through_the_launcher_and_stock_torchrun(tmp_path):
    """The command GPU users run, `torchrun --nproc_per_node=N -m torchtitan.train --module aogpt_plugin
    --config aogpt_debug`, trains on this CPU-only machine (the config function applies the CPU support)
    and prints the launcher's losses, which are 0.2.2's."""
    launcher = launch_train(
        ["--job.config_file", "train_configs/aogpt_debug.toml", *EIGHT_STEPS, "--validation.no-enable"]
        + ["--checkpoint.no-enable", "--job.dump_folder", str(tmp_path / "launcher")]
    )
    assert launcher.returncode == 0, launcher.stderr[-3000:]
    assert printed_losses(launcher.stdout + launcher.stderr) == DEBUG_LOSSES_0_2_2
    args = ["torchtitan.train", "--module", "aogpt_plugin", "--config", "aogpt_debug", *EIGHT_STEPS]
    stock = run_torchrun([*args, "--validator.no-enable", "--dump_folder", str(tmp_path / "stock")], nproc=1)
    assert stock.returncode == 0, stock.stderr[-3000:]
    assert printed_losses(stock.stdout + stock.stderr) == DEBUG_LOSSES_0_2_2
    record = json.loads((tmp_path / "stock" / "checkpoint" / "step-8" / "aogpt.json").read_text())
    assert record["torchtitan"].startswith("0.3") and sorted(record["losses"]) == [str(s) for s in range(1, 9)]


def _stock(tmp_path, *extra: str, torch_version: str | None = None) -> subprocess.CompletedProcess:
    """`python -m torchtitan.train --module aogpt_plugin --config aogpt_debug ...` as one process (torchrun's
    variables set by hand: torchrun itself prints a traceback of its own for any child that fails);
    `torch_version`: what torch says it is."""
    args = ["--module", "aogpt_plugin", "--config", "aogpt_debug", *extra]
    args += ["--dump_folder", str(tmp_path / "run"), "--validator.no-enable", "--metrics.disable_color_printing"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    env |= {"LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}
    command = [sys.executable, "-m", "torchtitan.train", *args]
    if torch_version:
        run = f"import runpy, sys, torch; torch.__version__ = {torch_version!r}; sys.argv[0] = 'torchtitan.train'; "
        command = [sys.executable, "-c", run + "runpy.run_module('torchtitan.train', run_name='__main__')", *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_stock_torchtitan_train_on_an_older_torch_is_one_line(tmp_path):
    proc = _stock(tmp_path, "--training.steps", "1", torch_version="2.13.0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "torchtitan 0.3.0 needs torch >= 2.14 and this is torch 2.13.0" in line, line
    assert not (tmp_path / "run").exists()


def test_stock_torchtitan_train_refuses_in_one_line(tmp_path):
    """Stock `-m torchtitan.train` runs our config function, tyro's build of `[aogpt]` and our Trainer
    inside its own main: a value refused while `[aogpt]` is built, and one the preflight refuses in
    the Trainer, and a step the guard stops (lr 1e4 diverges) end as one `error:` line and exit 2 there
    too, not a traceback (the good run: the test above)."""
    for bad, key in (
        (["--aogpt.shuffle_windows", "-3"], "shuffle_windows"),
        (["--training.seq_len", "4096"], "seq_len"),
    ):
        proc = _stock(tmp_path, "--training.steps", "1", *bad)
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        (line,) = error_lines(proc)
        assert key in line and line == proc.stderr.strip().splitlines()[-1]
        assert not (tmp_path / "run" / "checkpoint").exists()
    diverging = ["--optimizer.lr", "1e4", "--training.steps", "10", "--training.seq_len", "32"]
    proc = _stock(tmp_path, *diverging, "--training.local_batch_size", "4", "--checkpoint.no-enable")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    # the guard reads its checks at the recipe's logging steps (every 5th): found there, never checkpointed
    assert "NaN/inf" in line and "no checkpoint was written after step" in line


def test_float8_emulated_trains_as_on_0_2_2(tmp_path):
    """`--model.converters quantize.linear.float8 --quantize.linear.float8.emulate` (0.2.2's spelling)
    swaps the linears under 0.3 too, with the same losses as 0.2.2 (which differ from the plain run's
    10.83492 / 10.83815: the swap happened)."""
    args = ["--job.config_file", "train_configs/aogpt_debug.toml", "--training.steps", "2", "--debug.seed", "7"]
    args += [
        "--metrics.log_freq",
        "1",
        "--metrics.disable_color_printing",
        "--validation.no-enable",
        "--checkpoint.no-enable",
    ]
    args += ["--model.converters", "quantize.linear.float8", "--quantize.linear.float8.emulate"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    old = subprocess.run(
        [str(VENV022), "-m", "aogpt_plugin.train", *args, "--job.dump_folder", str(tmp_path / "old")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert old.returncode == 0, old.stderr[-3000:]
    new = launch_train([*args, "--job.dump_folder", str(tmp_path / "new")])
    assert new.returncode == 0, new.stderr[-3000:]
    losses = printed_losses(new.stdout + new.stderr)
    assert losses == printed_losses(old.stdout + old.stderr) and len(losses) == 2
    assert losses[1] != "10.83492" and losses[2] != "10.83815"


def test_bad_value_is_one_line_before_any_process_group(tmp_path):
    proc = launch_train(_args(tmp_path / "run", 2, **{"aogpt.p_l2r": 1.5}))
    assert proc.returncode == 2
    assert error_lines(proc) == [proc.stderr.strip().splitlines()[-1]]
    assert "aogpt.p_l2r=1.5" in proc.stderr and not (tmp_path / "run").exists()
    proc = launch_train(_args(tmp_path / "run", 2, **{"training.stepz": 3}))
    assert proc.returncode == 2 and len(error_lines(proc)) == 1, proc.stderr[-2000:]
    assert "training.stepz" in error_lines(proc)[0]


def test_training_starts_where_the_gpt2_ends(tmp_path):
    """As under 0.2.2 (tests/training/test_state_dict_adapter.py), `--checkpoint.initial_load_path HF_DIR
    --checkpoint.initial_load_in_hf` on GPT-2's backbone: the first step on left-to-right batches has
    transformers' loss (the folder and the loss come from the 0.2.2 venv, which has transformers)."""
    if not VENV022.exists():
        pytest.skip(f"no python with transformers at {VENV022} to make the GPT-2 with")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [str(VENV022), str(ROOT / "tests" / "helpers" / "gpt2_folder.py"), str(tmp_path / "hf"), "32", "4"]
    made = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    want = json.loads(made.stdout.strip().splitlines()[-1])["loss"]
    dump = tmp_path / "run"
    proc = launch_train(gpt2_start_args(dump, tmp_path / "hf", 1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert abs(recorded_losses(dump)[1] - want) < 1e-5


def test_the_curriculum_draws_and_logs_as_on_0_2_2(tmp_path):
    """`--aogpt.l2r_curriculum_steps` under 0.3: the share reaches TensorBoard (aogpt/l2r_share) and, with the
    global batch split into micro-batches, the steps' losses are 0.2.2's (the same orders were drawn)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    extra = {"aogpt.l2r_curriculum_steps": 2, "training.global_batch_size": 8, "validation.freq": 100}
    proc = launch_train(_args(tmp_path / "new", 3, **extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = (tmp_path / "new" / "tb").iterdir()
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("aogpt/l2r_share")] == [(1, 1.0), (2, 0.55), (3, 0.1)]
    if not VENV022.exists():
        pytest.skip(f"no torchtitan 0.2.2 python at {VENV022} to compare with")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [str(VENV022), "-m", "aogpt_plugin.train", *_args(tmp_path / "old", 3, **extra)]
    old = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert old.returncode == 0, old.stderr[-3000:]
    assert printed_losses(old.stdout + old.stderr) == printed_losses(proc.stdout + proc.stderr)
