"""`aogpt`: alone it lists its commands; every `--help` answers without importing torch (only the
command being run is imported, and argument definitions load no model code)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aogpt_plugin.cli import COMMANDS

HELPS = [[name] for name in COMMANDS if name != "lm-eval"] + [
    ["eval", "ppl"],
    ["eval", "genppl"],
    ["eval", "data"],
    ["bench", "train"],
    ["bench", "sampler"],
]


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_aogpt_alone_lists_every_command_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "aogpt_plugin.cli"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in COMMANDS:
        assert f"    {name}" in proc.stdout


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
def test_help_loads_no_torch(argv):
    code = (
        "import sys\nfrom aogpt_plugin.cli import main\n"
        f"try:\n    main({[*argv, '--help']!r})\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "heavy = [m for m in ('torch', 'numpy', 'torchtitan', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    assert "usage: aogpt" in proc.stdout and "HEAVY []" in proc.stdout, proc.stdout[-300:]


def test_the_check_can_fail_a_command_that_imports_torch():
    proc = python("import sys\nimport aogpt_plugin.likelihood\nprint('torch' in sys.modules)")
    assert proc.stdout.strip() == "True"
