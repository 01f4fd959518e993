"""`aogpt data prepare`: a corpus becomes jsonl shards + aogpt-data.json that training reads offline.

No test touches the network: local files and the shared WikiText-103 copy go through the real code,
the hub sources through an injected reader (and, once, the real reader refused by HF_HUB_OFFLINE).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED_DATA, debug_train_args, error_lines, launch_train

from aogpt_plugin.cli import main
from aogpt_plugin.data.manifest import MANIFEST
from aogpt_plugin.data.prepare import HUB_SOURCES, prepare
from aogpt_plugin.data.text_files import iter_documents, list_text_files
from aogpt_plugin.errors import ConfigError, UserError

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
WIKITEXT103_VALID = SHARED_DATA / "wikitext103" / "wiki.valid.raw"


def documents(n: int = 40) -> list[str]:
    return [f"Document {i}: the river town of Lorem {i} holds a market every {i % 7 + 1} days." for i in range(n)]


def write_jsonl(path, texts) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def read_manifest(folder) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr[-2000:]
    return lines[0]


def test_a_local_corpus_becomes_shards_and_a_manifest(tmp_path, capsys):
    texts = documents(40)
    src = write_jsonl(tmp_path / "corpus.jsonl", texts[:20] + ["", "   "] + texts[20:])  # blanks are dropped
    out = tmp_path / "prepared"
    assert main(["data", "prepare", src, str(out), "--shard-docs", "15"]) == 0
    captured = capsys.readouterr()
    assert "prepared 40 documents" in captured.out and "--training.dataset_path" in captured.out
    assert "prepare: 40 documents" in captured.err  # progress goes to stderr

    m = read_manifest(out)
    assert (m["format"], m["source"], m["documents"], m["skipped_blank"]) == ("aogpt-data", src, 40, 2)
    assert [s["documents"] for s in m["shards"]] == [15, 15, 10]
    assert m["command"] == f"aogpt data prepare {src} {out} --shard-docs 15" and m["created"]
    for shard in m["shards"]:
        data = (out / shard["name"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (shard["bytes"], shard["sha256"])
    assert m["bytes"] == sum(s["bytes"] for s in m["shards"])
    assert sorted(os.listdir(out)) == sorted([MANIFEST, *(s["name"] for s in m["shards"])])
    assert os.listdir(tmp_path) == ["corpus.jsonl", "prepared"]  # no temporary sibling left behind

    # the folder is the dataset path: its manifest's shards, in order, with the documents unchanged
    files = list_text_files(str(out))
    assert files == [str(out / s["name"]) for s in m["shards"]]
    assert [d for f in files for d in iter_documents(f)] == texts
    assert list_text_files(str(out / "*.jsonl")) == files  # the glob form too (the manifest is not data)

    # --force replaces it (only once the new one is complete); a .txt corpus reads by blank-line paragraphs
    txt = tmp_path / "corpus.txt"
    txt.write_text("\n\n".join(texts) + "\n")
    assert main(["data", "prepare", str(txt), str(out), "--force", "--max-docs", "25"]) == 0
    m = read_manifest(out)
    assert (m["documents"], len(m["shards"]), m["max_docs"]) == (25, 1, 25)
    assert sorted(os.listdir(out)) == [MANIFEST, "shard-00000.jsonl"]


def test_wikitext103_is_the_text_the_recipes_validate_on(tmp_path):
    """The non-blank rows of WikiText-103 raw validation, newline kept, as `wikitext103_validation` yields them."""
    if not WIKITEXT103_VALID.is_file():
        pytest.skip(f"no local WikiText-103 copy at {WIKITEXT103_VALID}")
    out = tmp_path / "wt103"
    m = prepare("wikitext103", str(out), data_dir=str(SHARED_DATA), read_hub=_no_network)
    rows = [line for line in WIKITEXT103_VALID.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
    assert (m["origin"], m["split"], m["documents"]) == (str(WIKITEXT103_VALID), "validation", len(rows))
    assert [d for f in list_text_files(str(out)) for d in iter_documents(f)] == rows


def _no_network(source, revision):
    raise AssertionError(f"the hub was asked for {source}")


def test_hub_sources_are_read_through_an_injectable_reader(tmp_path):
    asked = []

    def fake_hub(source, revision):
        asked.append((source, revision))
        return (f"web page {i}" for i in range(10)), "0123abcd"

    out = tmp_path / "owt"
    m = prepare("openwebtext", str(out), max_docs=6, revision="main", read_hub=fake_hub)
    assert asked == [(HUB_SOURCES["openwebtext"], "main")]
    assert (m["origin"], m["split"], m["revision"], m["documents"]) == (
        "hf:Skylion007/openwebtext [train]",
        "train",
        "0123abcd",
        6,
    )

    def broken_hub(source, revision):
        def rows():
            yield from ("a", "b", "c")
            raise ConnectionError("connection reset by peer")

        return rows(), None

    with pytest.raises(UserError, match=r"reading Skylion007/openwebtext \[train\] failed after 3 documents"):
        prepare("openwebtext", str(tmp_path / "broken"), read_hub=broken_hub)
    assert sorted(os.listdir(tmp_path)) == ["owt"]  # nothing half-written


def test_a_prepared_folder_missing_or_changing_a_shard_is_one_line(tmp_path):
    out = tmp_path / "prepared"
    prepare(write_jsonl(tmp_path / "c.jsonl", documents(30)), str(out), shard_docs=10)
    (out / "shard-00001.jsonl").unlink()
    with pytest.raises(
        ConfigError, match=r"1 of the 3 shards its aogpt-data.json lists are missing \(first: shard-00001"
    ):
        list_text_files(str(out), key="training.dataset_path")
    (out / "shard-00001.jsonl").write_text("")
    with pytest.raises(ConfigError, match=r"shard shard-00001.jsonl has 0 bytes but aogpt-data.json records"):
        list_text_files(str(out))


def test_data_prepare_help_loads_no_torch():
    code = (
        "import sys\nfrom aogpt_plugin.cli import main\n"
        "try:\n    main(['data', 'prepare', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print('HEAVY', [m for m in ('torch', 'datasets', 'torchtitan') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "usage: aogpt data prepare" in proc.stdout and "HEAVY []" in proc.stdout, proc.stderr[-2000:]


@pytest.fixture
def bad_inputs(tmp_path):
    """Paths for the bad-input table below, made in tmp_path."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    (tmp_path / "broken.jsonl").write_text('{"text": "fine"}\n{"title": "no text"}\n')
    write_jsonl(tmp_path / "ok.jsonl", documents(5))
    (tmp_path / "user_folder").mkdir()
    (tmp_path / "user_folder" / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("x")
    prepare(str(tmp_path / "ok.jsonl"), str(tmp_path / "done"))
    prepare(str(tmp_path / "ok.jsonl"), str(tmp_path / "done_plus"))
    (tmp_path / "done_plus" / "notes.txt").write_text("mine")
    return tmp_path


BAD = [
    (["nosuch", "out"], "SOURCE 'nosuch' is neither openwebtext nor wikitext103 nor an existing"),
    (["nosuch_*.jsonl", "out"], "SOURCE 'nosuch_*.jsonl' is neither openwebtext nor wikitext103"),
    (["empty.jsonl", "out"], "SOURCE 'empty.jsonl' holds no documents"),
    (["blank.txt", "out"], "SOURCE 'blank.txt' holds no documents"),
    (["broken.jsonl", "out"], "broken.jsonl:2 is not a JSON object with a 'text' field"),
    (["ok.jsonl", "user_folder"], "DIR 'user_folder' exists and is not a prepared data folder (no aogpt-data.json)"),
    (["ok.jsonl", "user_folder", "--force"], "is not a prepared data folder"),
    (["ok.jsonl", "done"], "DIR 'done' already holds prepared data (5 documents from "),
    (["ok.jsonl", "done_plus", "--force"], "holds 'notes.txt', which is not part of the prepared data"),
    (["ok.jsonl", "a_file"], "DIR 'a_file' is a file"),
    (["ok.jsonl", "out", "--shard-docs", "0"], "--shard-docs 0: documents per shard must be >= 1"),
    (["ok.jsonl", "out", "--shard-mb", "-1"], "--shard-mb -1.0: megabytes per shard must be > 0"),
    (["ok.jsonl", "out", "--revision", "v1"], "--revision 'v1' applies to the hub sources only"),
    (["ok.jsonl", "out", "--data-dir", "."], "--data-dir '.' applies to wikitext103 only"),
    (["openwebtext", "out"], "openwebtext: cannot read Skylion007/openwebtext [train] from the Hugging Face hub"),
    (["ok.jsonl", "out", "--shard-mbs", "3"], "unrecognized argument --shard-mbs; did you mean --shard-mb?"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_error_line(bad_inputs, argv, expected):
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", "data", "prepare", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=bad_inputs,
        env={**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(bad_inputs / "hf_cache")},
    )
    assert expected in one_error_line(proc)
    assert not (bad_inputs / "out").exists()
    assert not [n for n in os.listdir(bad_inputs) if n.startswith(".aogpt-prepare-")]


@pytest.mark.slow
def test_training_runs_offline_from_prepared_folders(tmp_path):
    """The recipes' overrides for a machine without network: `local` on a prepared training folder and
    a prepared WikiText-103 validation folder; a folder with a changed or a missing shard stops the
    launcher in one line, before any process group."""
    if not WIKITEXT103_VALID.is_file():
        pytest.skip(f"no local WikiText-103 copy at {WIKITEXT103_VALID}")
    train_dir, val_dir = tmp_path / "train", tmp_path / "wt103"
    assert (
        main(
            ["data", "prepare", write_jsonl(tmp_path / "c.jsonl", documents(40)), str(train_dir), "--shard-docs", "16"]
        )
        == 0
    )
    assert main(["data", "prepare", "wikitext103", str(val_dir), "--data-dir", str(SHARED_DATA)]) == 0
    env = {**OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "hf_cache")}
    data = {"training.dataset_path": str(train_dir), "validation.dataset_path": str(val_dir)}
    extra = {**data, "validation.freq": 3, "checkpoint.interval": 100}
    proc = launch_train(debug_train_args(tmp_path / "run", 3, **extra), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "step:  3" in log and "aogpt validation step 3" in log

    shard = train_dir / "shard-00001.jsonl"  # 64 flipped bytes, same size: the manifest's sha256 tells
    data = bytearray(shard.read_bytes())
    for i in range(len(data) - 65, len(data) - 1):
        data[i] ^= 0x01
    shard.write_bytes(bytes(data))
    flipped = launch_train(debug_train_args(tmp_path / "flipped", 3, **extra), env=env)
    assert flipped.returncode == 2 and "Training starts" not in flipped.stdout + flipped.stderr
    (line,) = error_lines(flipped)
    assert f"training.dataset_path={str(train_dir)!r}: shard shard-00001.jsonl does not match the sha256" in line

    (train_dir / "shard-00002.jsonl").unlink()
    bad = launch_train(debug_train_args(tmp_path / "bad", 3, **extra), env=env)
    assert bad.returncode == 2
    (line,) = error_lines(bad)
    assert f"training.dataset_path={str(train_dir)!r}: 1 of the 3 shards its aogpt-data.json lists are missing" in line


def test_a_device_or_fifo_as_dir_is_refused_before_reading_the_source(tmp_path):
    """Reported: `aogpt data prepare SRC /dev/full` refused only after reading and writing the whole corpus."""
    src = write_jsonl(tmp_path / "c.jsonl", documents(5))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for out, kind in (("/dev/full", "a character device"), (str(fifo), "a FIFO (named pipe)")):
        with pytest.raises(UserError, match=re.escape(f"DIR '{out}' is {kind}; give a folder path")):
            prepare(src, out, read_hub=lambda *a: pytest.fail("read before the check"))
    assert not [n for n in os.listdir("/dev") if n.startswith(".aogpt-prepare-")]


def test_a_real_full_disk_is_one_line_and_leaves_no_temporary(small_disk, tmp_path):
    disk = small_disk("64k")
    src = write_jsonl(tmp_path / "c.jsonl", documents(4000))  # about 330 kB
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", "data", "prepare", src, str(disk / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_error_line(proc)
    assert line.startswith(f"error: the disk is full: writing DIR '{disk}/out' failed after ") and (
        "(No space left on device) and its temporary folder was removed; the source's files take 3" in line
    ), line
    assert os.listdir(disk) == []


@pytest.mark.parametrize("signum", [2, 15])
def test_ctrl_c_or_sigterm_while_preparing_is_one_line_and_removes_the_temporary(tmp_path, signum):
    """Reported: Ctrl-C printed a KeyboardInterrupt traceback; SIGTERM printed nothing and left the
    temporary folder until the next prepare."""
    import signal

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "helpers" / "slow_hub_prepare.py"), str(out)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    for line in proc.stderr:
        if line.startswith("20 documents read"):
            break
    proc.send_signal(signum)
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signum
    (line,) = [ln for ln in err.splitlines() if ln.startswith(("error", "stopped", "Traceback"))]
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
    assert line.startswith(f"stopped by {name}; DIR '{out}' was not written (its temporary folder, "), line
    assert os.listdir(tmp_path) == []
