"""`aogpt`: alone it lists its commands; every `--help` answers without importing torch (only the
command being run is imported, and argument definitions load no model code)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from aogpt_plugin.cli import COMMANDS

HELPS = [[name] for name in COMMANDS if name != "lm-eval"] + [  # lm_eval's own parser loads torch
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


def test_version_names_aogpt_torch_and_torchtitan_without_importing_them():
    from importlib import metadata

    code = (
        "import sys\nfrom aogpt_plugin.cli import main\nmain(['--version'])\n"
        "print('HEAVY', [m for m in ('torch', 'torchtitan') if m in sys.modules])"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    first, heavy = proc.stdout.strip().splitlines()
    assert first.startswith(f"aogpt {metadata.version('aogpt')} (torch {metadata.version('torch')}, torchtitan ")
    assert heavy == "HEAVY []"


def test_the_check_can_fail_a_command_that_imports_torch():
    proc = python("import sys\nimport aogpt_plugin.likelihood\nprint('torch' in sys.modules)")
    assert proc.stdout.strip() == "True"


# ---- every message names the bad thing; output that cannot be written is one line ----


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from conftest import tiny_model

    from aogpt_plugin.model_dir import save_model

    path = tmp_path_factory.mktemp("cli") / "model"
    save_model(tiny_model("adaln", max_seq_len=24, preset="sampler"), str(path))
    return str(path)


def aogpt(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", *argv], capture_output=True, text=True, timeout=300, **kw
    )


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["sample", "--model", "M", "--num-smaples", "3"],
            "aogpt sample: unrecognized argument --num-smaples; did you mean --num-samples?",
        ),  # fmt: skip
        (
            ["eval", "ppl", "--model", "M", "--dataset", "ptb", "--ordr", "l2r"],
            "unrecognized argument --ordr; did you mean --order?",
        ),  # fmt: skip
        (
            ["bench", "sampler", "--modl=x"],
            "aogpt bench sampler: unrecognized argument --modl=x; did you mean --model?",
        ),
        (["sample", "--model", "M", "--num-samples", "x"], "argument --num-samples: invalid int value: 'x'"),
    ],
)
def test_an_unknown_option_is_named_with_the_closest_valid_one(capsys, argv, expected):
    from aogpt_plugin.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert expected in one_error_line(capsys.readouterr().err)


def test_output_to_a_full_disk_is_one_line_not_a_traceback(model_dir):
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "aogpt_plugin.cli",
                "sample",
                "--model",
                model_dir,
                "--length",
                "8",
                "--no-progress",
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 1
    assert one_error_line(proc.stderr) == "error: cannot write the output to stdout: No space left on device"


def test_a_reader_that_left_before_the_output_is_a_silent_exit(model_dir):
    """`aogpt sample | true`: the pipe is closed before the (buffered) samples are written at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", model_dir, "--length", "8", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=300) == 0 and stderr == "", stderr


def test_a_batch_that_cannot_fit_in_memory_is_refused_before_any_work(model_dir):
    proc = aogpt(["sample", "--model", model_dir, "--num-samples", "1000000000"])
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2 and proc.stdout == ""
    assert line.startswith("error: --num-samples 1000000000 needs about ") and "allowed here: up to " in line


def test_a_model_folder_whose_weights_changed_is_refused_by_aogpt_sample(model_dir, tmp_path):
    import shutil

    changed = tmp_path / "changed"
    shutil.copytree(model_dir, changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    for i in range(len(data) - 64, len(data)):  # 64 flipped bytes in the last tensor: still parses
        data[i] ^= 0x01
    weights.write_bytes(bytes(data))
    proc = aogpt(["sample", "--model", str(changed), "--length", "8", "--no-progress"])
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"'{weights}' does not match the sha256 recorded in its config.json" in one_error_line(proc.stderr)
    proc = aogpt(["sample", "--model", str(changed), "--length", "8", "--no-progress", "--no-verify"])
    assert "sha256" not in proc.stderr


@pytest.mark.parametrize("argv", [["eval", "ppl"], ["eval", "genppl"], ["bench", "sampler"]], ids=" ".join)
def test_every_command_that_loads_a_model_folder_takes_no_verify(argv):
    proc = aogpt([*argv, "--help"])
    assert proc.returncode == 0 and "--no-verify" in proc.stdout


def test_aogpt_lists_train_and_every_option_of_every_command_says_what_it_does():
    """Reported: no `train` in the command list; `aogpt sample --help` showed `--seed SEED` undescribed."""
    import argparse

    from aogpt_plugin.cli import COMMANDS, build_parser

    assert "train" in COMMANDS

    def parsers(p):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    undescribed = []
    for command, (module, _) in COMMANDS.items():
        if module is None:
            continue
        for p in parsers(build_parser(command)):
            for action in p._actions:
                if action.option_strings and not isinstance(action, argparse._HelpAction) and not action.help:
                    undescribed.append(f"{p.prog} {action.option_strings[0]}")
    assert undescribed == []


@pytest.mark.slow
def test_aogpt_train_is_the_launcher(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", "train", "--job.config_file", "train_configs/aogpt_debug.toml"]
        + ["--job.dump_folder", str(tmp_path / "run"), "--training.stepz", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown option --training.stepz")


def test_train_help_is_aogpts_own_page_with_every_key_of_its_sections(capsys):
    """`aogpt train --help`: the entry points of both torchtitan versions, the recipes, and every [aogpt] and
    [ema] key with its default (from the section dataclasses, so a new key appears by itself); torchtitan's
    full help stays one flag away (with a recipe, the launcher prints it)."""
    import dataclasses

    from aogpt_plugin.cli import main
    from aogpt_plugin.training.sections import AOGPT, EMA

    assert main(["train", "--help"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("usage: aogpt train --job.config_file RECIPE.toml")
    assert "--module aogpt_plugin --config aogpt_debug" in page and "-m torchtitan.train --job.config_file" in page
    assert "aogpt_small.toml" in page and "aogpt train --job.config_file RECIPE.toml --help" in page
    for section, cls in (("[aogpt]", AOGPT), ("[ema]", EMA)):
        block = page.split(f"\n{section}\n")[1]
        for f in dataclasses.fields(cls):
            assert f"  {f.name} = " in block, f.name
    assert "  p_l2r = 0.1 " in page and "  enable = true " in page


def test_the_installed_commands_end_with_an_idle_executor_thread_still_alive():
    """Reported: `aogpt bench sampler --graphs compile` printed its rounds and then hung: the end joined every
    thread before the thread-exit hooks that tell idle executor workers (inductor's compile pool) to stop. The
    end now runs Python's own order; an idle ThreadPoolExecutor worker is what it must get past."""
    script = (
        "import sys\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from aogpt_plugin.cli import _exit_process\n"
        "pool = ThreadPoolExecutor(2)\n"
        "assert pool.submit(lambda: 7).result() == 7\n"
        "print('done', flush=True)\n"
        "_exit_process(5)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (5, "done\n", "")
