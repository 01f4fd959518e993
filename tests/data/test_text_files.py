"""text_files.py's answer when the recipes' shared data folder (`../shared/data`) is missing: named as such,
with where it was looked for and how to point elsewhere, not as a pattern matching no files (reported)."""

from __future__ import annotations

import re

import pytest

from aogpt_plugin.data import text_files
from aogpt_plugin.errors import ConfigError

PATTERN = "../shared/data/train_corpus/enwiki2015_train_*.jsonl"


def _refused(path: str, key: str = "training.dataset_path") -> str:
    with pytest.raises(ConfigError) as info:
        text_files.list_text_files(path, key=key)
    return str(info.value)


def test_a_missing_shared_folder_beside_the_checkout_is_named_with_where_it_was_looked_for(tmp_path, monkeypatch):
    checkout, beside = tmp_path / "repo", tmp_path / "shared" / "data"
    checkout.mkdir()
    monkeypatch.setattr(text_files, "BESIDE_THE_CHECKOUT", str(beside))
    monkeypatch.chdir(checkout)
    for path in (PATTERN, "../shared/data/train_corpus/enwiki2015_heldout.jsonl"):
        assert _refused(path) == (
            f"the shared data folder beside the checkout is missing: looked for {beside} (training.dataset_path="
            f"{path!r} reads it); put the data there (README), or point training.dataset_path at your own "
            ".jsonl/.json/.txt files"
        )
    (tmp_path / "shared").mkdir()  # ../shared without data/ is still no data folder
    assert _refused(PATTERN, "CORPUS").startswith(
        f"the shared data folder beside the checkout is missing: looked for {beside}"
    )


def test_run_from_another_folder_the_recipes_path_says_where_the_data_is(tmp_path, monkeypatch):
    beside = tmp_path / "shared" / "data"
    (beside / "train_corpus").mkdir(parents=True)
    monkeypatch.setattr(text_files, "BESIDE_THE_CHECKOUT", str(beside))
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "elsewhere" / "deeper")
    message = _refused(PATTERN)
    assert message.startswith(f"training.dataset_path={PATTERN!r} reads the shared data folder beside the checkout")
    assert f"run from the checkout (it is there, {beside})" in message
    beside.joinpath("train_corpus").rmdir()
    beside.rmdir()
    assert f"(it is missing there too: looked for {beside})" in _refused(PATTERN)


def test_a_missing_file_inside_a_present_shared_folder_keeps_the_plain_message(tmp_path, monkeypatch):
    """The case the shared-folder wording must not take: the folder is there, the pattern is wrong."""
    beside = tmp_path / "shared" / "data"
    beside.mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.setattr(text_files, "BESIDE_THE_CHECKOUT", str(beside))
    monkeypatch.chdir(tmp_path / "repo")
    assert re.fullmatch(r"training\.dataset_path='.*' matches no files; .*", _refused(PATTERN))
    assert _refused("../shared/data/none.jsonl").endswith(
        "does not exist; give a .jsonl/.json/.txt file or a folder of them"
    )
    assert "matches no files" in _refused(str(tmp_path / "nowhere" / "*.jsonl"))  # not the recipes' folder
