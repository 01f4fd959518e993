"""checkpoint_save.py: every step folder records its model; a resume into another model, a conversion
with another tokenizer and a full disk are one line each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, debug_train_args, error_lines, launch_train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 4-step debug run with checkpoints at steps 2 and 4."""
    dump = tmp_path_factory.mktemp("ckpt") / "run"
    proc = launch_train(debug_train_args(dump, 4, **{"validation.freq": 100}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dump


def test_every_step_folder_records_model_args_tokenizer_settings_and_losses(run):
    from aogpt_plugin.model import FLAVORS

    for step in (2, 4):
        record = json.loads((run / "checkpoint" / f"step-{step}" / "aogpt.json").read_text())
        assert record["step"] == step and record["flavor"] == "debugmodel" and record["tokenizer"] == "gpt2"
        expected = FLAVORS["debugmodel"].to_dict() | {"vocab_size": 50257}
        assert record["model_args"] == expected
        assert record["aogpt"]["conditioning"] == "adaln" and record["aogpt"]["order"] == "mixture"
        assert record["ema"]["enable"] is True
        assert sorted(map(int, record["losses"])) == [step - 1, step]  # the steps since the previous save
        assert all(normal for _, normal in record["losses"].values())


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (["--model.flavor", "tiny"], "was trained with model.flavor='debugmodel' and this run has model.flavor='tiny'"),
        (
            ["--aogpt.conditioning", "concat"],
            "was trained with aogpt.conditioning='adaln' and this run has aogpt.conditioning='concat'",
        ),
        (["--aogpt.tokenizer", "symbols:100"], "was trained with aogpt.tokenizer=gpt2 and this run has"),
        (["--ema.no-enable"], "was trained with ema.enable=True and this run has ema.enable=False"),
    ],
)
def test_resuming_into_another_model_is_one_line_naming_the_key_and_both_values(run, tmp_path, override, needle):
    """Reported: `ValueError: Size mismatch ... for ema.final_adaln.bias`, 84 lines."""
    dump = tmp_path / "run"
    shutil.copytree(run, dump)
    proc = launch_train(debug_train_args(dump, 6, **{"validation.freq": 100}) + override, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert needle in line and "checkpoint/step-4" in line, line
    assert "Training starts" not in proc.stderr


def test_an_old_checkpoint_without_a_record_is_checked_by_tensor_shapes(run, tmp_path):
    dump = tmp_path / "run"
    shutil.copytree(run, dump)
    for record in dump.glob("checkpoint/step-*/aogpt.json"):
        record.unlink()
    proc = launch_train(debug_train_args(dump, 6, **{"validation.freq": 100, "model.flavor": "tiny"}), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "of shape" in line and "this run builds" in line and "model.flavor='tiny'" in line, line


def test_convert_takes_the_model_and_tokenizer_from_the_record(run, tmp_path):
    from aogpt_plugin.convert import convert
    from aogpt_plugin.model_dir import read_config

    config = convert(str(run / "checkpoint"), str(tmp_path / "m"))
    assert config.tokenizer == "gpt2" and config.model_args.vocab_size == 50257
    assert read_config(str(tmp_path / "m")).extra["training"]["flavor"] == "debugmodel"
    # reported: `--tokenizer symbols:100` on a GPT-2 run wrote vocab_size 100 and exited 0
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", "convert", str(run / "checkpoint"), str(tmp_path / "bad")]
        + ["--tokenizer", "symbols:100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and not (tmp_path / "bad").exists()
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: --tokenizer 'symbols:100' (100 tokens) is not the tokenizer"), line
    assert "50257 tokens" in line


def test_a_checkpoint_save_on_a_full_disk_is_one_line_and_keeps_every_older_checkpoint(tmp_path):
    """The step-4 data file is /dev/full: the kernel answers ENOSPC exactly as a full disk does."""
    dump = tmp_path / "run"
    (dump / "checkpoint" / "step-4").mkdir(parents=True)
    (dump / "checkpoint" / "step-4" / "__0_0.distcp").symlink_to("/dev/full")
    proc = launch_train(debug_train_args(dump, 6, **{"validation.freq": 100, "checkpoint.interval": 2}))
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert line.startswith("error: the disk is full: saving ") and "No space left on device" in line, line
    assert f"the newest complete checkpoint is {dump}/checkpoint/step-2 and nothing older was deleted" in line
    assert (dump / "checkpoint" / "step-2" / ".metadata").is_file()
    assert not (dump / "checkpoint" / "step-4").exists()  # the partial folder is gone
