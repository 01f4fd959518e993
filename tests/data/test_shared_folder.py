"""data/shared_folder.py: the offline data is found with nothing exported, from the shared data folder beside
the checkout; a folder or cache the user names always wins, and without either nothing changes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import SHARED_DATA

from aogpt_plugin.data import shared_folder


@pytest.fixture
def beside(tmp_path, monkeypatch):
    folder = tmp_path / "shared" / "data"
    monkeypatch.setattr(shared_folder, "BESIDE_THE_CHECKOUT", str(folder))
    monkeypatch.delenv("AOGPT_DATA_DIR", raising=False)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    return folder


def test_the_folder_beside_the_checkout_is_the_default_and_the_variable_wins(beside, monkeypatch, tmp_path):
    assert shared_folder.default_data_dir() is None  # not there: nothing
    beside.mkdir(parents=True)
    assert shared_folder.default_data_dir() == str(beside)
    monkeypatch.setenv("AOGPT_DATA_DIR", str(tmp_path / "mine"))
    assert shared_folder.default_data_dir() == str(tmp_path / "mine")


def test_the_tiktoken_cache_of_the_data_folder_is_used_only_when_none_is_set(beside, monkeypatch):
    shared_folder.use_shared_tiktoken_cache()
    assert "TIKTOKEN_CACHE_DIR" not in os.environ  # no folder: online use untouched
    (beside / "tiktoken_cache").mkdir(parents=True)
    shared_folder.use_shared_tiktoken_cache()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(beside / "tiktoken_cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/my/cache")
    shared_folder.use_shared_tiktoken_cache()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/my/cache"


@pytest.mark.skipif(not (SHARED_DATA / "tiktoken_cache").is_dir(), reason="needs ../shared/data")
def test_a_clean_environment_beside_the_shared_folder_works_offline():
    """What a new shell has: PATH and HOME, no AOGPT_DATA_DIR or TIKTOKEN_CACHE_DIR, no network needed: GPT-2's
    tokenizer loads and `aogpt eval data --dataset wikitext2` reads the local copy."""
    if os.path.realpath(shared_folder.BESIDE_THE_CHECKOUT) != os.path.realpath(SHARED_DATA):
        pytest.skip("the shared data folder of this run is not the one beside the checkout")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "HF_HUB_OFFLINE": "1"}
    code = (
        "from aogpt_plugin.cli import main\n"
        "raise SystemExit(main(['eval', 'data', '--dataset', 'wikitext2', '--seq-len', '1024', '--json']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "274796" in proc.stdout  # wikitext2 test's tokens (docs/evaluation.md, section 7)


def test_a_missing_shared_folder_is_named_as_such_by_the_tokenizer_and_the_benchmarks(beside, monkeypatch):
    """Reported: without ../shared a sample or an evaluation answered with an unset TIKTOKEN_CACHE_DIR or a file
    that was not there, never with the folder that is missing. Now both name it and where it was looked for;
    with the folder there, the message is about the file (the check can fail)."""
    import tiktoken

    from aogpt_plugin.data.tokenizer import load_tokenizer
    from aogpt_plugin.errors import UserError
    from aogpt_plugin.eval import benchmarks

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.setattr(benchmarks, "_reachable", lambda host: False)
    missing = f"the shared data folder beside the checkout is missing (looked for {beside}): put it there, or set"
    with pytest.raises(UserError, match=re.escape(missing)):
        load_tokenizer("gpt2")
    with pytest.raises(UserError, match=re.escape(f"wikitext2 test: no local file, and {missing}")):
        benchmarks.load_documents("wikitext2", "test")
    beside.mkdir(parents=True)
    with pytest.raises(UserError, match="TIKTOKEN_CACHE_DIR") as info:
        load_tokenizer("gpt2")
    assert "shared data folder" not in str(info.value)
