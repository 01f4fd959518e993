"""launcher.py's first checks, before torchtitan is imported: a missing torchtitan names the extras to
install; a second recipe on the command line is refused (torchtitan would read only the first); no
arguments print what to give; a missing recipe is named with the nearest one; torchtitan's slow help
says so first. And the resume advice a stop prints: the command the user ran."""

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


NO_TORCHTITAN = {"PYTHONPATH": f"{ROOT / 'tests' / 'helpers' / 'no_torchtitan'}:{ROOT}"}  # torchtitan hidden


@pytest.mark.parametrize(
    "command, program",
    [(["python", "-m", "aogpt_plugin.train"], "python -m aogpt_plugin.train"), (["aogpt", "train"], "aogpt train")],
)
def test_no_arguments_print_what_to_give_the_recipes_and_an_example(command, program):
    """Reported: `aogpt train` alone said `job.custom_config_module='' lacks the [aogpt] section`. Now the usage,
    the recipes and one example, spelled as the user started it (`aogpt train` passes that on), before any
    torchtitan import (it is hidden here)."""
    proc = _run(command, NO_TORCHTITAN)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines[0] == f"usage: {program} --job.config_file RECIPE.toml [--SECTION.KEY VALUE ...]"
    assert lines[1].startswith("recipes in train_configs/: aogpt_debug.toml, ") and "study/ holds" in lines[1]
    assert lines[2].endswith(f": {program} --job.config_file train_configs/aogpt_debug.toml")
    assert len(lines) == 4 and not any(ln.startswith("error") for ln in lines)


@pytest.mark.parametrize(
    "given, what, near",
    [
        ("train_configs/aogpt_dbug.toml", "does not exist", "train_configs/aogpt_debug.toml"),
        ("aogpt_debug.toml", "does not exist", "train_configs/aogpt_debug.toml"),  # the folder left out
        ("train_configs/study/ar_adaln.tml", "does not exist", "train_configs/study/ar_adaln.toml"),
        ("train_configs", "is a folder", None),
        ("nothing/like/it.toml", "does not exist", None),
    ],
)
def test_a_missing_recipe_is_answered_before_torchtitan_with_the_nearest_and_the_list(given, what, near):
    """Reported: a typo in the recipe path took 14-42 s and answered `[Errno 2] No such file or directory`.
    Now one line with the nearest recipe and the list, checked before torchtitan is imported: torchtitan is
    hidden here, and the answer is still the recipe's (not "install torchtitan")."""
    proc = _run(["aogpt", "train", "--job.config_file", given, "--training.steps", "3"], NO_TORCHTITAN)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.splitlines()
    hint = f"; did you mean {near}? " if near else "; "
    assert line.startswith(f"error: --job.config_file {given!r} {what}{hint}recipes in train_configs/: "), line
    assert "aogpt_debug.toml, aogpt_medium.toml" in line


def test_options_without_a_recipe_name_the_missing_option_with_an_example():
    proc = _run(["aogpt", "train", "--training.steps", "3"], NO_TORCHTITAN)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: --job.config_file RECIPE.toml is required; recipes in train_configs/: ")
    assert line.endswith("; e.g. aogpt train --job.config_file train_configs/aogpt_debug.toml"), line


def test_the_recipe_checks_import_neither_torch_nor_torchtitan():
    """The answer comes in a second because nothing heavy is imported before it."""
    script = (
        "import sys\n"
        "sys.argv = ['aogpt_plugin.train', '--job.config_file', 'train_configs/aogpt_dbug.toml']\n"
        "from aogpt_plugin.training.launcher import main\n"
        "code = main()\n"
        "print(code, sorted(m for m in ('torch', 'torchtitan', 'tyro') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split("\n")[0] == "2 []", proc.stdout + proc.stderr[-2000:]
    assert "did you mean train_configs/aogpt_debug.toml?" in proc.stderr


def test_a_signal_just_after_the_handlers_are_installed_is_still_one_line():
    """Reported by CI: a SIGTERM landing between the handlers' installation and the launch's `try` (while the
    world of one was set up) ended in an Interrupted traceback and exit 1. Here the signal is sent from
    exactly there: one line, 143."""
    script = (
        "import os, signal, sys, time\n"
        "sys.argv = ['aogpt_plugin.train', '--job.config_file', 'train_configs/aogpt_debug.toml']\n"
        "from aogpt_plugin.training import launcher\n"
        "def signalled():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "launcher.default_to_one_process = signalled\n"
        "sys.exit(launcher.main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == ["stopped at once by SIGTERM during start-up; nothing was trained or saved"]


@pytest.mark.parametrize(
    ("options", "toml", "expected"),
    [
        (["--aogpt.ordr", "l2r"], None, "error: unknown option --aogpt.ordr; did you mean --aogpt.order?"),
        (["--ema.decay=x"], None, "error: --ema.decay='x' has the wrong type; allowed: a number"),
        ([], "[aogpt]\nordr = 'l2r'\n", "error: unknown key in {path}: [aogpt] ordr (did you mean order?)"),
        ([], "[aogpt]\np_l2r = 'abc'\n", "error: aogpt.p_l2r='abc' in {path} has the wrong type; allowed: a number"),
        ([], "[aogpt\n", "error: {path} is not valid TOML: Expected ']' at the end of a table declaration (at line 1"),
        ([], b"\xff[aogpt]\n", "error: {path} is not valid TOML: 'utf-8' codec can't decode byte 0xff"),
    ],
)
def test_aogpts_own_keys_and_values_are_checked_before_torch_is_imported(tmp_path, options, toml, expected):
    """Reported: key and value typos got good suggestions, but after 18-38 s (torchtitan's import). The
    [aogpt] and [ema] sections and their options are aogpt's own: answered before torch is imported."""
    path = "train_configs/aogpt_debug.toml"
    if toml is not None:
        path = str(tmp_path / "recipe.toml")
        (Path(path).write_bytes if isinstance(toml, bytes) else Path(path).write_text)(toml)
    script = (
        "import sys\n"
        f"sys.argv = ['aogpt_plugin.train', '--job.config_file', {path!r}, *{options!r}]\n"
        "from aogpt_plugin.training.launcher import main\n"
        "code = main()\n"
        "print(code, sorted(m for m in ('torch', 'torchtitan') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split("\n")[0] == "2 []", proc.stdout + proc.stderr[-2000:]
    (line,) = proc.stderr.splitlines()
    assert line.startswith(expected.format(path=path)), line


def test_a_typo_in_torchtitans_own_sections_is_still_named_once_torchtitan_is_imported():
    """The control: torchtitan's sections are checked after its import, with the nearest key."""
    proc = _run(["aogpt", "train", "--job.config_file", "train_configs/aogpt_debug.toml", "--training.stepz", "3"])
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == "error: unknown option --training.stepz; did you mean --training.steps?"


def test_torchtitans_full_help_says_first_that_it_loads_for_a_while():
    """Reported: `--job.config_file X --help` printed nothing for 50 s. Its first line now says what is
    loading and about how long, before torch is imported (the run is stopped once the line is read)."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    command = ["aogpt", "train", "--job.config_file", "train_configs/aogpt_debug.toml", "--help"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.communicate()
    assert first.startswith("loading torchtitan's full help: it imports torch and torchtitan first (10 s to a minute")
    assert "aogpt's own options at once: aogpt train --help" in first


def _checkpoints(folder: Path, *steps: int) -> str:
    for step in steps:
        (folder / f"step-{step}").mkdir(parents=True)
        (folder / f"step-{step}" / ".metadata").write_bytes(b"")
    return str(folder)


def test_the_resume_advice_is_the_same_command_when_it_resumes_the_newest_checkpoint(tmp_path, monkeypatch):
    """Re-running the same command resumes the newest complete checkpoint (torchtitan's rule), so that is the
    advice, with any --checkpoint.load_step the user gave dropped; an older checkpoint needs load_step."""
    from aogpt_plugin.training.launcher import resume_command

    monkeypatch.delenv("AOGPT_TRAIN_COMMAND", raising=False)
    folder = _checkpoints(tmp_path / "checkpoint", 2, 4)
    argv = ["--job.config_file", "r.toml", "--checkpoint.load_step", "2", "--job.dump_folder", "d x"]
    assert resume_command(argv, 1, folder, 4) == (
        "python -m aogpt_plugin.train --job.config_file r.toml --job.dump_folder 'd x'"
    )
    assert resume_command(argv, 1, folder, 2, **{"optimizer.lr": 1e-4}) == (
        "python -m aogpt_plugin.train --job.config_file r.toml --job.dump_folder 'd x' --checkpoint.load_step 2 "
        "--optimizer.lr 0.0001"
    )
    monkeypatch.setenv("AOGPT_TRAIN_COMMAND", "aogpt train")
    assert resume_command(["--job.config_file=r.toml", "--checkpoint.load-step=4"], 1, folder, 4) == (
        "aogpt train --job.config_file=r.toml"
    )
