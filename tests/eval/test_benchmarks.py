"""Benchmark documents: where they are read from, what one document is, one-line errors; and packing:
EOS after every document, one stream, only the final partial chunk dropped, with the document / token /
chunk counts of the benchmark files in ../shared/data."""

import json
import os
import re

import pytest
import torch
from conftest import SHARED_DATA

from aogpt_plugin.data.tokenizer import TiktokenTokenizer
from aogpt_plugin.errors import UserError
from aogpt_plugin.eval import benchmarks
from aogpt_plugin.eval.benchmarks import BENCHMARKS, check_dataset_arg, data_dir, load_documents, pack_documents


@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    """A data dir with tiny benchmark files, and a hub that cannot be reached."""
    (tmp_path / "wikitext2").mkdir()
    (tmp_path / "wikitext2" / "wiki.test.raw").write_text(" \n = Title = \n \n A b @-@ c , d . \n", encoding="utf-8")
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.test.txt").write_text(" no it was n't \n\n the N cats \n", encoding="utf-8")
    (tmp_path / "lambada").mkdir()
    records = [{"text": "He said “hi” to Bob"}, {"text": " Trailing space "}]
    lines = [json.dumps(r) for r in records]
    (tmp_path / "lambada" / "lambada_test.jsonl").write_text(lines[0] + "\n\n" + lines[1] + "\n", encoding="utf-8")
    monkeypatch.setenv("AOGPT_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(benchmarks, "_reachable", lambda host, timeout=3.0: False)
    return tmp_path


def test_data_dir_comes_from_the_flag_the_environment_or_the_folder_beside_the_checkout(monkeypatch, tmp_path):
    from aogpt_plugin.data import shared_folder

    monkeypatch.delenv("AOGPT_DATA_DIR", raising=False)
    monkeypatch.setattr(shared_folder, "BESIDE_THE_CHECKOUT", str(tmp_path / "no" / "shared"))
    assert data_dir() is None  # an installed wheel has no ../shared beside it: the hub is tried instead
    monkeypatch.setattr(shared_folder, "BESIDE_THE_CHECKOUT", str(tmp_path))
    assert data_dir() == tmp_path  # a checkout with the shared data folder beside it: found, nothing exported
    monkeypatch.setenv("AOGPT_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert data_dir(str(other)) == other  # --data-dir wins
    with pytest.raises(UserError, match="--data-dir .* is not a folder") as info:
        data_dir(str(tmp_path / "missing"))
    assert "\n" not in str(info.value)


def test_wikitext_document_is_a_line_and_blank_lines_are_empty_documents(fake_data):
    docs = load_documents("wikitext2", "test")
    assert docs.texts == ["", " = Title =\n", "", " A b-c, d.\n"]
    assert docs.source == str(fake_data / "wikitext2" / "wiki.test.raw")
    assert (docs.split, docs.detokenizer) == ("test", "wikitext")


def test_ptb_document_is_a_stripped_line(fake_data):
    assert load_documents("ptb", "test").texts == ["no it wasn't", "", "the 1 cats"]


def test_lambada_records_skip_blank_lines_and_get_the_authors_newline(fake_data):
    assert load_documents("lambada", "test").texts == ['\nHe said "hi" to Bob', "\nTrailing space"]


MISSING = [
    ("ptb", "validation", r"ptb validation: no local file .*ptb\.valid\.txt and huggingface\.co cannot"),
    ("lm1b", "test", r"lm1b test: no local file .*news\.en\.heldout-00000-of-00050 and huggingface\.co cannot"),
]


@pytest.mark.parametrize("hub", ["unreachable", "offline"])
def test_missing_local_file_and_unreachable_hub_is_one_line_error(fake_data, monkeypatch, hub):
    """The same one line whether the hub cannot be reached or HF_HUB_OFFLINE=1 forbids it (and the HF
    cache has no copy): the test sets each environment itself instead of inheriting the caller's."""
    if hub == "unreachable":
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        for dataset, split, message in MISSING:
            with pytest.raises(UserError, match=message) as info:
                load_documents(dataset, split)
            assert "\n" not in str(info.value)
        return
    # offline: the real `datasets` in a fresh process (it reads the variables at import), empty HF cache
    import subprocess
    import sys

    code = (
        "from aogpt_plugin.errors import UserError\nfrom aogpt_plugin.eval.benchmarks import load_documents\n"
        f"for dataset, split in {[(d, s) for d, s, _ in MISSING]!r}:\n"
        "    try:\n        load_documents(dataset, split)\n    except UserError as e:\n        print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(fake_data / "hf")}
    env["AOGPT_DATA_DIR"] = str(fake_data)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(lines) == len(MISSING), proc.stderr[-2000:]
    for line, (_, _, message) in zip(lines, MISSING, strict=True):
        assert re.search(message, line), line


def test_lambada_falls_back_to_the_openai_url(fake_data):
    (fake_data / "lambada" / "lambada_test.jsonl").unlink()
    with pytest.raises(UserError, match="openaipublic.blob.core.windows.net cannot be reached"):
        load_documents("lambada", "test")


def test_unknown_dataset_and_split_are_rejected_before_loading(tmp_path):
    with pytest.raises(UserError, match=r"--dataset 'wikitext3' is neither a benchmark \(wikitext2, wikitext103"):
        check_dataset_arg("wikitext3", "test")
    with pytest.raises(UserError, match=r"--split 'train' does not exist for lambada; allowed: test"):
        check_dataset_arg("lambada", "train")
    with pytest.raises(UserError, match="--dataset"):
        check_dataset_arg(str(tmp_path / "missing.jsonl"), "test")


def test_local_text_file_is_read_without_detokenizer(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one , two"}\n{"text": "three"}\n', encoding="utf-8")
    docs = load_documents(str(path))
    assert docs.texts == ["one , two", "three"]
    assert (docs.source, docs.split, docs.detokenizer) == (str(path), None, None)


def test_every_benchmark_has_a_test_split_and_a_hub_source():
    assert set(BENCHMARKS) == {"wikitext2", "wikitext103", "ptb", "lambada", "lm1b"}
    for bench in BENCHMARKS.values():
        assert "test" in bench.local
        assert bench.hub.dataset


# ---- packing -----------------------------------------------------------------------------------
EOS = 50256


@pytest.fixture(scope="module")
def tokenizer():
    return TiktokenTokenizer("gpt2")


def test_eos_after_each_document_and_final_partial_chunk_dropped(tokenizer):
    texts = ["Hello world", "", "A second document."]
    packed = pack_documents(texts, tokenizer, seq_len=4)
    stream = tokenizer.encode("Hello world") + [EOS, EOS] + tokenizer.encode("A second document.") + [EOS]
    assert packed.tokens == len(stream) == 9
    assert packed.documents == 3
    assert packed.dropped_tokens == 1
    assert packed.chunks.tolist() == [stream[0:4], stream[4:8]]
    assert packed.chunks.dtype == torch.long


def test_fewer_tokens_than_one_chunk_gives_no_chunks(tokenizer):
    packed = pack_documents(["short"], tokenizer, seq_len=64)
    assert packed.num_chunks == 0 and packed.dropped_tokens == packed.tokens == 2


# (dataset, split): documents (= lines/records in shared/data/README.md), tokens with EOS, chunks of 1024, dropped
SHARED_DATA_COUNTS = {
    ("wikitext2", "test"): (4358, 274796, 268, 364),
    ("wikitext2", "validation"): (3760, 239912, 234, 296),
    ("wikitext103", "test"): (4358, 274796, 268, 364),
    ("wikitext103", "validation"): (3760, 239912, 234, 296),
    ("ptb", "test"): (3761, 91135, 88, 1023),
    ("ptb", "validation"): (3370, 81773, 79, 877),
    ("lambada", "test"): (5153, 428743, 418, 711),
    ("lm1b", "test"): (6075, 176267, 172, 139),
}


@pytest.mark.parametrize(("dataset", "split"), list(SHARED_DATA_COUNTS))
def test_shared_data_counts(dataset, split, tokenizer, monkeypatch):
    monkeypatch.setenv("AOGPT_DATA_DIR", str(SHARED_DATA))
    if not (data_dir() / BENCHMARKS[dataset].local[split][0]).is_file():
        pytest.skip(f"{dataset} {split} is not in {data_dir()}")
    docs = load_documents(dataset, split)
    packed = pack_documents(docs.texts, tokenizer, seq_len=1024)
    counts = (packed.documents, packed.tokens, packed.num_chunks, packed.dropped_tokens)
    print(f"{dataset} {split}: documents, tokens, chunks of 1024, dropped = {counts}")
    assert counts == SHARED_DATA_COUNTS[(dataset, split)]
    assert packed.tokens == sum(len(tokenizer.encode(t)) + 1 for t in docs.texts)
    assert packed.num_chunks * 1024 + packed.dropped_tokens == packed.tokens
    assert (packed.chunks == EOS).sum().item() <= packed.documents
