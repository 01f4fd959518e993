"""data/manifest.py: a prepared folder's shards are checked against the sha256 its manifest records
(a changed byte keeps the size), each file hashed once while its path, size and mtime stay the same."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from aogpt_plugin.cli import main
from aogpt_plugin.data.manifest import VERIFIED_FILE, cache_dir, verify_shards
from aogpt_plugin.errors import ConfigError

SKIP = "--aogpt.no-verify-data"


@pytest.fixture
def prepared(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} of the corpus"}) + "\n" for i in range(30)))
    out = tmp_path / "prepared"
    assert main(["data", "prepare", str(src), str(out), "--shard-docs", "10"]) == 0
    return out


def _verify(folder) -> int:
    return verify_shards(str(folder), "training.dataset_path", SKIP)


def test_every_shard_is_hashed_once_then_only_when_it_changes(prepared):
    assert _verify(prepared) == 3
    assert _verify(prepared) == 0  # unchanged: not read again (a 40 GB corpus is hashed once)
    assert os.path.isfile(os.path.join(cache_dir(), VERIFIED_FILE))
    shard = prepared / "shard-00001.jsonl"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    assert _verify(prepared) == 1  # touched: hashed again (and still matches)
    copy = prepared.parent / "copy"
    shutil.copytree(prepared, copy)  # a copy elsewhere (say rsync -a, same mtimes) is hashed afresh
    assert _verify(copy) == 3


@pytest.mark.parametrize("change", ["flip", "edit"])
def test_a_shard_changed_at_its_size_is_one_line_naming_it(prepared, change):
    """Reported: 64 flipped bytes passed the start-up check and died after the process group started in a
    75-line DatasetGenerationError; an edit keeping the JSON valid trained silently."""
    assert _verify(prepared) == 3
    shard = prepared / "shard-00002.jsonl"
    data = bytearray(shard.read_bytes())
    if change == "flip":
        for i in range(len(data) - 65, len(data) - 1):
            data[i] ^= 0x01
    else:
        data = bytearray(bytes(data).replace(b"document 25", b"document 52"))
    shard.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as e:
        _verify(prepared)
    assert str(e.value) == (
        f"training.dataset_path={str(prepared)!r}: shard shard-00002.jsonl does not match the sha256 its "
        "aogpt-data.json records (a corrupt or changed copy); copy the whole folder again or re-run `aogpt data "
        f"prepare` ({SKIP} trains on it anyway)"
    )


def test_an_unwritable_cache_only_costs_hashing_again(prepared, monkeypatch, tmp_path):
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("AOGPT_CACHE_DIR", str(blocked))
    assert _verify(prepared) == 3 and _verify(prepared) == 3


def test_each_folder_is_checked_under_its_own_lock_into_one_record(prepared):
    """Two datasets' checks take separate locks (one does not wait for the other's hashing), and what
    each found is merged into the one record: neither is hashed again."""

    def locks() -> set[str]:
        return {n for n in os.listdir(cache_dir()) if n.startswith(VERIFIED_FILE) and n.endswith(".lock")}

    copy = prepared.parent / "copy"
    shutil.copytree(prepared, copy)
    assert _verify(prepared) == 3
    before = locks()
    assert _verify(copy) == 3
    assert len(locks() - before) == 1  # the copy's own lock
    assert _verify(prepared) == 0 and _verify(copy) == 0
