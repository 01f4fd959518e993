"""The README's Train, Convert and Python sections run verbatim, in order, in a fresh copy of the repository.

A newcomer runs them after `make demo`; each block must work as written (distinct dump folders,
paths that exist). Slow: it trains the debug recipe three times (1 process, FSDP2, compile). The
Python block also runs in the default suite, on a model folder of the debug recipe's shape.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, SHARED_DATA


def readme_blocks(section: str, language: str = "bash") -> list[str]:
    text = (ROOT / "README.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.S)


def block_command(block: str, language: str) -> list[str]:
    return ["bash", "-euo", "pipefail", "-c", block] if language == "bash" else [sys.executable, "-c", block]


READ_ENV = {  # what the README's Install block exports
    "TIKTOKEN_CACHE_DIR": str(SHARED_DATA / "tiktoken_cache"),
    "AOGPT_DATA_DIR": str(SHARED_DATA),
    "OMP_NUM_THREADS": "1",
}


def test_the_sections_hold_the_commands_a_newcomer_needs():
    train, convert = readme_blocks("Train"), readme_blocks("Convert, sample, evaluate")
    assert any("python -m aogpt_plugin.train" in b for b in train)
    assert any("aogpt convert" in b and "aogpt eval genppl" in b for b in convert)
    dumps = re.findall(r"--job\.dump_folder (\S+)", "".join(train))
    assert len(dumps) == len(set(dumps)) == 3  # each extra run has a folder of its own
    python = readme_blocks("Python", "python")
    calls = ("aogpt_plugin.load(", ".generate(", ".logprob(", ".backward()", ".score(")
    assert len(python) == 1 and all(call in python[0] for call in calls)


def test_the_gpt2_section_holds_both_ways_in():
    (block,) = readme_blocks("Start from GPT-2")
    for command in ("aogpt convert --from-hf", "--checkpoint.initial_load_in_hf", "make_gpt2_standin.py"):
        assert command in block, command
    text = (ROOT / "README.md").read_text().split("\n## Start from GPT-2\n", 1)[1].split("\n## ", 1)[0]
    assert "aogpt_small_from_gpt2.toml" in text and "l2r_curriculum_steps" in text


def test_the_python_block_runs_as_written(tmp_path):
    """The block verbatim, where the Convert block leaves the debug model: here a folder of the debug
    recipe's shape with random weights (the slow test below runs it on the trained model)."""
    from aogpt_plugin.model import AOGPT
    from aogpt_plugin.model.args import FLAVORS
    from aogpt_plugin.model_dir import save_model

    torch.manual_seed(0)
    model = AOGPT(FLAVORS["debugmodel"])
    model.init_weights()
    save_model(model, str(tmp_path / "outputs" / "aogpt_debug_model"))
    (block,) = readme_blocks("Python", "python")
    proc = subprocess.run(
        block_command(block, "python"),
        cwd=tmp_path,
        env={**os.environ, **READ_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("torch.Size([4, 128])") and lines[-1].startswith("ppl "), proc.stdout


@pytest.mark.slow
def test_train_convert_and_python_blocks_run_verbatim_in_order(tmp_path):
    clone = tmp_path / "repo"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv*", "outputs", "__pycache__", ".whl"))
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # ../shared beside the copy, as in CI
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(clone),
        **READ_ENV,
    }
    for section, language in (("Train", "bash"), ("Convert, sample, evaluate", "bash"), ("Python", "python")):
        for block in readme_blocks(section, language):
            proc = subprocess.run(
                block_command(block, language),
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            assert proc.returncode == 0, f"{section} block failed:\n{block}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_the_start_from_gpt2_block_runs_verbatim(tmp_path):
    """Its commands as written, in a fresh copy: the stand-in GPT-2, `aogpt convert --from-hf`, training from it,
    evaluation in both readings, an infill (minutes)."""
    pytest.importorskip("transformers")
    clone = tmp_path / "repo"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv*", "outputs", "__pycache__", ".whl"))
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(clone),
        **READ_ENV,
    }
    (block,) = readme_blocks("Start from GPT-2")
    proc = subprocess.run(
        block_command(block, "bash"), cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"{block}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (
        proc.stdout.count("ppl ") >= 2 and (clone / "outputs" / "aogpt_tiny_from_gpt2_model" / "config.json").exists()
    )
