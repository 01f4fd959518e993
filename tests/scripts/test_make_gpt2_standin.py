"""scripts/make_gpt2_standin.py: a GPT2LMHeadModel trained by transformers on the training shards, saved as a
Hugging Face folder that aogpt reads as a GPT-2 of the `gpt2-tiny` flavor; seeded; never the held-out file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import HELDOUT, ROOT

from aogpt_plugin.model import FLAVORS
from aogpt_plugin.model.gpt2 import check_gpt2_matches, read_gpt2_folder

pytest.importorskip("transformers")
SCRIPT = ROOT / "scripts" / "make_gpt2_standin.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from aogpt_plugin.data.tokenizer_training import train_tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_tokenizer(str(HELDOUT), 300, str(path), max_bytes=100_000)  # a tokenizer only: no model trains on it
    return str(path)


@pytest.mark.slow
def test_the_stand_in_is_a_gpt2_of_the_tiny_flavor_and_seeded(tmp_path, tokenizer):
    import dataclasses

    for name in ("a", "b"):
        proc = run(str(tmp_path / name), "--steps", "3", "--batch", "2", "--tokenizer", tokenizer)
        assert proc.returncode == 0, proc.stderr[-3000:]
    folder = read_gpt2_folder(str(tmp_path / "a"))
    check_gpt2_matches(folder, dataclasses.replace(FLAVORS["gpt2-tiny"], vocab_size=300), "model.flavor='gpt2-tiny'")
    assert (tmp_path / "a" / "tokenizer.json").read_text() == open(tokenizer).read()  # the folder carries it
    record = json.loads((tmp_path / "a" / "standin.json").read_text())
    assert record["steps"] == 3 and record["final_loss"] > 0
    weights = [(tmp_path / n / "model.safetensors").read_bytes() for n in ("a", "b")]
    assert weights[0] == weights[1]  # the same command, the same weights


def test_the_held_out_file_and_an_existing_folder_are_refused(tmp_path, tokenizer):
    proc = run(str(tmp_path / "x"), "--steps", "1", "--tokenizer", tokenizer, "--data", str(HELDOUT))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("the stand-in trains on training shards only")
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    (tmp_path / "taken").mkdir()
    proc = run(str(tmp_path / "taken"), "--steps", "1")
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == f"error: {tmp_path / 'taken'} exists; pass --force to replace it"
    )


def test_it_prints_its_own_lines_and_no_library_noise(tmp_path, tokenizer):
    """Reported: torchao's `Failed to load ..._C_mxfp8....so` / `_C_cutlass_90a.abi3.so` lines and torch's
    `_pytree` deprecations around the stand-in's own output (library_noise.py drops them first)."""
    proc = run(str(tmp_path / "g"), "--steps", "1", "--batch", "2", "--tokenizer", tokenizer)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout.startswith("step 1/1  loss ")
