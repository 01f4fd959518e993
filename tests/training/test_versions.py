"""torchtitan 0.3 on a torch too old for it (it needs >= 2.14): one line naming both versions."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
import torch
from conftest import ROOT, error_lines

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.training import versions


@pytest.mark.parametrize("old", ["2.13.0", "2.11.0+cu130", "1.13.1"])
def test_titan03_on_an_older_torch_is_one_line_naming_both(monkeypatch, old):
    monkeypatch.setattr(versions, "is_titan03", lambda: True)
    monkeypatch.setattr(versions, "torchtitan_version", lambda: "0.3.0")
    monkeypatch.setattr(torch, "__version__", old)
    with pytest.raises(
        ConfigError, match=rf"torchtitan 0\.3\.0 needs torch >= 2\.14 and this is torch {re.escape(old)};"
    ):
        versions.check_torch_for_titan03()


@pytest.mark.parametrize("new", ["2.14.1+cu130", "2.14.0a0+git1234", "2.15.0", "3.0.0"])
def test_titan03_on_torch_2_14_or_newer_and_titan022_on_any_torch_pass(monkeypatch, new):
    monkeypatch.setattr(torch, "__version__", new)
    monkeypatch.setattr(versions, "is_titan03", lambda: True)
    versions.check_torch_for_titan03()
    monkeypatch.setattr(torch, "__version__", "2.11.0")
    monkeypatch.setattr(versions, "is_titan03", lambda: False)
    versions.check_torch_for_titan03()


def test_the_titan03_extra_requires_the_torch_the_check_asks_for():
    """pyproject's `titan03` extra and versions.TORCH_FOR_TITAN03 name one minimum."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["titan03"]
    (torch_req,) = [r for r in extra if re.match(r"torch\b", r)]
    assert torch_req == "torch>=" + ".".join(map(str, versions.TORCH_FOR_TITAN03))


LAUNCH_ON_OLD_TORCH = """
import runpy, sys, torch
import aogpt_plugin.training.versions as versions
torch.__version__ = "2.13.0"
versions.is_titan03, versions.torchtitan_version = (lambda: True), (lambda: "0.3.0")
sys.argv = ["aogpt_plugin.train", "--job.config_file", "train_configs/aogpt_debug.toml"]
runpy.run_module("aogpt_plugin.train", run_name="__main__")
"""


def test_the_launcher_on_an_older_torch_exits_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCH_ON_OLD_TORCH], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "torchtitan 0.3.0 needs torch >= 2.14 and this is torch 2.13.0" in line, line
