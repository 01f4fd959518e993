"""launcher.py's first checks, before torchtitan is imported: a missing torchtitan names the extras to
install, and a second recipe on the command line is refused (torchtitan would read only the first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from aogpt_plugin.training.versions import TORCHTITAN_MISSING


def _run(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **(env or {})}
    return subprocess.run(command, cwd=ROOT, env=full, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-m", "aogpt_plugin.train", "--job.config_file", "train_configs/aogpt_debug.toml"],
        ["aogpt", "train", "--job.config_file", "train_configs/aogpt_debug.toml"],
    ],
)
def test_without_torchtitan_training_names_the_extras_to_install(tmp_path, command):
    """Reported: a 35-line `ModuleNotFoundError: No module named 'torchtitan'`, also for `aogpt train --help`.
    torchtitan is hidden from the import system (a sitecustomize on PYTHONPATH), as if never installed."""
    proc = _run(command, {"PYTHONPATH": str(ROOT / "tests" / "helpers" / "no_torchtitan")})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [f"error: {TORCHTITAN_MISSING}"]
    assert (
        "pip install 'aogpt[titan022]'" in TORCHTITAN_MISSING and "pip install 'aogpt[titan03]'" in TORCHTITAN_MISSING
    )


def test_without_torchtitan_train_help_is_the_page_with_the_extras_to_install():
    """`aogpt train --help` needs no torchtitan (training/help_page.py): the page, exit 0, opening with how to
    install it."""
    proc = _run(["aogpt", "train", "--help"], {"PYTHONPATH": str(ROOT / "tests" / "helpers" / "no_torchtitan")})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: aogpt train") and lines[2] == f"note: {TORCHTITAN_MISSING}"
    assert "torchtitan is not installed" in proc.stdout and "[aogpt]" in proc.stdout


def test_a_second_job_config_file_is_refused_in_one_line():
    """Reported: a second --job.config_file was ignored without a word."""
    proc = _run(
        ["python", "-m", "aogpt_plugin.train", "--job.config_file", "train_configs/aogpt_debug.toml"]
        + ["--job.config_file=train_configs/aogpt_small.toml"]
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: --job.config_file is given 2 times ('train_configs/aogpt_debug.toml', "
        "'train_configs/aogpt_small.toml'); a run reads one recipe: give one and change its values with "
        "--section.key options"
    ]
