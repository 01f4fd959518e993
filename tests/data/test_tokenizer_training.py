"""`aogpt tokenizer train` trains a tokenizer.json in seconds; bad arguments, an existing OUT, a full
disk and a signal are one line each, and OUT is written whole or not at all."""

from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import HELDOUT

from aogpt_plugin.cli import main
from aogpt_plugin.errors import Interrupted


def test_the_train_command(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["tokenizer", "train", str(HELDOUT), str(out), "--vocab-size", "280", "--max-bytes", "100000"]) == 0
    assert "trained a 280-token byte-level BPE" in capsys.readouterr().out and out.exists()
    assert main(["tokenizer", "train", str(HELDOUT), str(tmp_path / "t.txt"), "--vocab-size", "280"]) == 2
    assert "must be a path ending in .json" in capsys.readouterr().err
    assert main(["tokenizer", "train", str(tmp_path / "none"), str(out), "--vocab-size", "280"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_an_existing_out_is_replaced_only_with_force_and_a_fifo_never(tmp_path, capsys):
    """Reported: `aogpt tokenizer train` overwrote an existing file without --force."""
    out = tmp_path / "t.json"
    out.write_text("the user's tokenizer")
    argv = ["tokenizer", "train", str(HELDOUT), str(out), "--vocab-size", "280", "--max-bytes", "100000"]
    assert main(argv) == 2 and out.read_text() == "the user's tokenizer"
    assert f"error: OUT '{out}' already exists; pass --force to replace it" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0 and json.loads(out.read_text())["model"]["type"] == "BPE"
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert main(["tokenizer", "train", str(HELDOUT), str(fifo), "--vocab-size", "280"]) == 2
    assert "is a FIFO (named pipe), not a file" in capsys.readouterr().err


def test_a_real_full_disk_is_one_line_and_leaves_no_partial_file(small_disk, capsys):
    """Reported: a 0-byte tok.json was left behind, after a `No space left on device` traceback."""
    disk = small_disk("16k")
    out = disk / "t.json"
    assert main(["tokenizer", "train", str(HELDOUT), str(out), "--vocab-size", "600", "--max-bytes", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the disk is full: writing OUT '{out}' failed (No space left on device); it needs ")
    assert err.rstrip().endswith("nothing was written") and os.listdir(disk) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_training_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, signum):
    """The signal is raised in the corpus reader, which tokenizers' Rust trainer calls back into."""
    from aogpt_plugin.data import tokenizer_training

    def interrupted_documents(path):
        yield "a first document"
        raise Interrupted(signum)

    monkeypatch.setattr(tokenizer_training, "iter_documents", interrupted_documents)
    out = tmp_path / "t.json"
    assert main(["tokenizer", "train", str(HELDOUT), str(out), "--vocab-size", "280"]) == 128 + signum
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
    assert capsys.readouterr().err == f"stopped by {name}; OUT '{out}' was not written\n"
    assert os.listdir(tmp_path) == []
