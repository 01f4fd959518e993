"""Training under torchtitan 0.3 through `python -m aogpt_plugin.train`: exact resume on two FSDP
ranks, the checkpoint record, `aogpt convert`, and checkpoints moving between versions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, debug_train_args, error_lines, launch_train, run_torchrun

from .conftest import needs_titan03, printed_losses

pytestmark = needs_titan03
VENV022 = Path(os.environ.get("AOGPT_PYTHON022", ROOT / ".venv" / "bin" / "python"))


def _recorded_losses(dump: Path) -> dict[int, float]:
    losses = {}
    for record in sorted((dump / "checkpoint").glob("step-*/aogpt.json")):
        losses |= {int(s): v[0] for s, v in json.loads(record.read_text())["losses"].items()}
    return losses


def _validation(proc) -> list[str]:
    """The validation metrics line of step 6 (raw and EMA weights)."""
    marker = "aogpt validation step 6: "
    return [ln.split(marker)[1] for ln in (proc.stdout + proc.stderr).splitlines() if marker in ln]


def _args(dump: Path, steps: int, **extra) -> list[str]:
    return debug_train_args(dump, steps, **{"checkpoint.interval": 3, "validation.freq": steps, **extra})


@pytest.mark.slow
def test_two_fsdp_processes_resume_exactly(tmp_path):
    dump = tmp_path / "run"
    full = run_torchrun(["aogpt_plugin.train", *_args(dump, 6)], nproc=2)
    assert full.returncode == 0, full.stderr[-3000:]
    first = printed_losses(full.stdout + full.stderr)
    recorded = _recorded_losses(dump)
    assert sorted(first) == sorted(recorded) == list(range(1, 7))
    record = json.loads((dump / "checkpoint" / "step-6" / "aogpt.json").read_text())
    assert record["torchtitan"].startswith("0.3") and record["step"] == 6
    shutil.rmtree(dump / "checkpoint" / "step-6")
    resumed = run_torchrun(["aogpt_plugin.train", *_args(dump, 6)], nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = printed_losses(resumed.stdout + resumed.stderr)
    assert sorted(again) == [4, 5, 6]
    assert {s: first[s] for s in (4, 5, 6)} == again
    after = _recorded_losses(dump)  # the new step-6 record: the resumed run's losses, full precision
    assert {s: recorded[s] for s in (4, 5, 6)} == {s: after[s] for s in (4, 5, 6)}
    val, val_again = _validation(full), _validation(resumed)
    assert val and val == val_again  # EMA included: its state resumed too


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


STOCK = """
import sys
from aogpt_plugin.training.launcher import default_to_one_process
from aogpt_plugin.training.titan03.cpu import enable_torchtitan_on_cpu
default_to_one_process()
for name in [n for n in sys.modules if n.startswith("aogpt_plugin")]:
    del sys.modules[name]  # as under `-m torchtitan.train`: torchtitan first, then --module's import
enable_torchtitan_on_cpu()  # what a GPU node does not need
import torchtitan.train
sys.argv[0] = "torchtitan.train"
torchtitan.train.main()
"""


def test_stock_torchtitan_train_runs_module_aogpt_plugin(tmp_path):
    """`python -m torchtitan.train --module aogpt_plugin --config aogpt_debug` (emulated: on a CPU the
    stock entry dies on triton first): the package imports under 0.3, the recipe is the config."""
    args = ["--module", "aogpt_plugin", "--config", "aogpt_debug", "--training.steps", "1", "--debug.seed", "7"]
    args += ["--dump_folder", str(tmp_path / "run"), "--validator.no-enable", "--metrics.disable_color_printing"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", STOCK, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert printed_losses(proc.stdout + proc.stderr) == {1: "10.83492"}  # the launcher's and 0.2.2's step 1
    assert (tmp_path / "run" / "checkpoint" / "step-1" / "aogpt.json").is_file()


def _stock(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    args = ["--module", "aogpt_plugin", "--config", "aogpt_debug", *extra]
    args += ["--dump_folder", str(tmp_path / "run"), "--validator.no-enable", "--metrics.disable_color_printing"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", STOCK, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


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
    assert "NaN/inf" in line and "stopped before the optimizer step" in line


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
