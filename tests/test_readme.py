"""The README as a newcomer meets it: two commands, then blocks that run pasted into a new shell, in order.

The default suite checks the text: the two commands are what CI runs, every path a later block reads is
made by `make demo` or by an earlier block (or is in the checkout), and the Python block runs as written
on a model folder of the demo's shape. The slow test runs `scripts/demo.sh` in a fresh copy and then
every later block in `env -i` (PATH and HOME only), the venv activated as the README says.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SHARED_DATA

README = ROOT / "README.md"
ACTIVATE = ". .venv/bin/activate"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in reading order."""
    return re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)


def later_blocks() -> list[tuple[str, str]]:
    """The blocks after the two commands up to the Test section (whose commands run this file), but the
    activation line (run before each block instead)."""
    text = README.read_text().split("\n## Test\n", 1)[0]
    return [(lang, body) for lang, body in code_blocks(text)[1:] if body.strip() != ACTIVATE]


def commands(body: str) -> list[list[str]]:
    """Each shell command of a block as tokens (continued lines joined, comments dropped)."""
    return [shlex.split(line, comments=True) for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def demo_outputs() -> set[str]:
    """The folders scripts/demo.sh writes under its $OUT."""
    script = (ROOT / "scripts" / "demo.sh").read_text()
    (out,) = re.findall(r"^OUT=(\S+)$", script, flags=re.M)
    return {f"{out}/{rel}" for rel in re.findall(r'"\$OUT/([\w/.-]+)"', script)}


def written_by(tokens: list[str]) -> set[str]:
    """What a README command makes under outputs/: a training run's dump folder (flag or recipe), a file
    written by `>` or `--out`, else the last outputs/ path not given as an input option (convert's,
    export's, a tokenizer's OUT)."""
    line = " ".join(tokens)
    if "aogpt_plugin.train" in line or tokens[:2] == ["aogpt", "train"]:
        if "--job.dump_folder" in tokens:
            return {tokens[tokens.index("--job.dump_folder") + 1]}
        (recipe,) = [t for t in tokens if t.startswith("train_configs/")]
        return {tomllib.loads((ROOT / recipe).read_text())["job"]["dump_folder"].removeprefix("./")}
    redirected = {tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in (">", "--out")}
    if redirected:  # a shell redirection or a results file
        return {t for t in redirected if t.startswith("outputs/")}
    inputs = {
        tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in ("--model", "--scorer", "--tokenizer", "--from-hf")
    }
    writes = "convert" in tokens or "export" in tokens or tokens[:3] == ["aogpt", "tokenizer", "train"]
    writes |= any(t.endswith("make_gpt2_standin.py") for t in tokens)
    outputs = [t for t in tokens if t.startswith("outputs/") and t not in inputs]
    return {outputs[-1]} if writes and outputs else set()


def test_the_readme_starts_with_the_two_commands_ci_runs():
    first = code_blocks(README.read_text())[0][1]
    assert [c[:2] for c in commands(first)] == [["make", "demo"], ["make", "test"]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.M), "CI runs the README's test command"
    for target in re.findall(r"make (test-[\w]+)", first):  # what the test line says CI also runs
        assert re.search(rf"^make {target}$", ci, flags=re.M), target


def test_every_path_a_later_block_reads_exists_after_the_demo_and_the_blocks_before():
    made, checked = demo_outputs(), 0
    assert {"outputs/demo/train", "outputs/demo/model"} <= made

    def exists(path: str) -> bool:
        return any(path == m or path.startswith(m + "/") for m in made)

    for lang, body in later_blocks():
        lines = commands(body) if lang == "bash" else [re.findall(r"[\"'](outputs/[^\"']+)[\"']", body)]
        for tokens in lines:
            new = written_by(tokens) if lang == "bash" else set()
            for token in tokens:
                for path in re.findall(r"(?:^|=)((?:outputs|train_configs|scripts)/[\w/.*-]+)", token):
                    checked += 1
                    if path.startswith("outputs/"):
                        assert path in new or exists(path), f"{path} is read before anything makes it:\n{body}"
                    else:
                        assert (ROOT / path).exists(), path
                if token.startswith("../shared/data/") and SHARED_DATA.exists():
                    assert list(ROOT.glob(token)), token
            made |= new
    assert checked >= 10


def test_a_path_no_one_makes_is_caught():
    """The check above fails on what the README once said: a folder the demo never made."""
    tokens = shlex.split("aogpt sample --model outputs/aogpt_debug_model --length 8")
    assert not written_by(tokens) and "outputs/aogpt_debug_model" not in demo_outputs()
    assert written_by(shlex.split("printf x > outputs/r.jsonl")) == {"outputs/r.jsonl"}
    assert written_by(shlex.split("aogpt convert outputs/demo/train/checkpoint outputs/m --weights ema")) == {
        "outputs/m"
    }


def test_the_python_block_runs_as_written(tmp_path):
    """The block verbatim, on a folder of the demo model's shape with random weights (the slow test below
    runs it on the trained one)."""
    from aogpt_plugin.model import AOGPT
    from aogpt_plugin.model.args import FLAVORS
    from aogpt_plugin.model_dir import save_model

    torch.manual_seed(0)
    model = AOGPT(FLAVORS["debugmodel"])
    model.init_weights()
    save_model(model, str(tmp_path / "outputs" / "demo" / "model"))
    (block,) = [body for lang, body in later_blocks() if lang == "python"]
    proc = subprocess.run(
        [sys.executable, "-"],
        input=block,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "AOGPT_DATA_DIR")},  # found alone
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("torch.Size([4, 128])") and lines[-1].startswith("ppl "), proc.stdout


@pytest.mark.slow
def test_the_demo_then_every_later_block_runs_pasted_into_a_clean_shell(tmp_path):
    """A fresh copy with ../shared beside it and this venv as its .venv; the demo, then each block in
    `env -i PATH HOME`, activated as the README says, in order (about 7 min on 2 cores)."""
    clone = tmp_path / "repo"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv*", "outputs", "__pycache__", "*.whl"))
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # ../shared beside the copy, as in CI
    # the copy's .venv activates this one (a file, not a link: nothing run in the copy can reinstall it)
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "activate").write_text(f". {Path(sys.executable).parent / 'activate'}\n")
    clean = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path))}

    def run(script: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["env", "-i", *(f"{k}={v}" for k, v in clean.items()), "bash", "-euo", "pipefail", "-c", script],
            input=stdin,
            cwd=clone,
            capture_output=True,
            text=True,
            timeout=3600,
        )

    demo = run(f"{ACTIVATE} && bash scripts/demo.sh")
    assert demo.returncode == 0, demo.stderr[-3000:]
    for lang, body in later_blocks():
        proc = run(f"{ACTIVATE}\n{body}") if lang == "bash" else run(f"{ACTIVATE} && python -", stdin=body)
        assert proc.returncode == 0, f"block failed:\n{body}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (clone / "outputs" / "aogpt_tiny_from_gpt2_model" / "config.json").exists()


def gpt2_block() -> tuple[list[str], int]:
    """The README's GPT-2 block ("Start from a checkpoint or from GPT-2") as shell lines (continued lines
    joined), and the index of its training command."""
    (body,) = [body for lang, body in later_blocks() if lang == "bash" and "make_gpt2_standin.py" in body]
    lines = [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    (train,) = [i for i, line in enumerate(lines) if "aogpt_plugin.train" in line or line.startswith("aogpt train")]
    return lines, train


@pytest.mark.slow
def test_the_gpt2_block_run_twice_trains_once_and_then_says_it_has_nothing_to_train(tmp_path):
    """Reported: re-running the README's GPT-2 block trained 0 steps and said "Training completed" (its dump
    folder already held step-100; torchtitan resumed it and dropped --checkpoint.initial_load_path with two
    WARNING lines in the INFO flood). In a fresh copy, the whole block twice, as written: the first trains; the
    second's training command is one line saying there is nothing to train and how to go on, exit 0, and the
    rest of the block runs again (about 4 min on 2 cores)."""
    clone = tmp_path / "repo"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv*", "outputs", "__pycache__", "*.whl"))
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "activate").write_text(f". {Path(sys.executable).parent / 'activate'}\n")
    clean = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path))}

    def run(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["env", "-i", *(f"{k}={v}" for k, v in clean.items()), "bash", "-euo", "pipefail", "-c", script],
            cwd=clone, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip

    lines, train = gpt2_block()
    block = "\n".join([ACTIVATE, *lines])
    first = run(block)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Training completed" in first.stdout + first.stderr  # the first time it trains
    again = run(block)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Training completed" not in again.stdout + again.stderr
    (line,) = [x for x in again.stderr.splitlines() if x.startswith("nothing to train")]
    assert re.fullmatch(
        r"nothing to train: \./outputs/aogpt_tiny_from_gpt2/checkpoint/step-100 is a complete checkpoint of step 100 "
        r"and training\.steps is 100; train further with --training\.steps N \(N > 100\), or start afresh with "
        r"another --job\.dump_folder",
        line,
    ), line
    alone = run(f"{ACTIVATE}\n{lines[train]}")  # the training command alone: that one line and nothing else
    assert alone.returncode == 0 and alone.stderr.splitlines() == [line] and alone.stdout == "", alone.stderr[-3000:]
