"""`aogpt tokenizer train` trains a tokenizer.json in seconds; bad arguments are one line."""

from __future__ import annotations

from conftest import HELDOUT

from aogpt_plugin.cli import main


def test_the_train_command(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["tokenizer", "train", str(HELDOUT), str(out), "--vocab-size", "280", "--max-bytes", "100000"]) == 0
    assert "trained a 280-token byte-level BPE" in capsys.readouterr().out and out.exists()
    assert main(["tokenizer", "train", str(HELDOUT), str(tmp_path / "t.txt"), "--vocab-size", "280"]) == 2
    assert "must be a path ending in .json" in capsys.readouterr().err
    assert main(["tokenizer", "train", str(tmp_path / "none"), str(out), "--vocab-size", "280"]) == 2
    assert "does not exist" in capsys.readouterr().err
