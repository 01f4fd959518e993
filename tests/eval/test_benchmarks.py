"""Benchmark documents: where they are read from, what one document is, and one-line errors."""

import json

import pytest

from aogpt_plugin.errors import UserError
from aogpt_plugin.eval import benchmarks
from aogpt_plugin.eval.benchmarks import BENCHMARKS, check_dataset_arg, data_dir, load_documents


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


def test_data_dir_defaults_to_shared_data_beside_the_repo(monkeypatch):
    monkeypatch.delenv("AOGPT_DATA_DIR", raising=False)
    repo = __import__("pathlib").Path(benchmarks.__file__).resolve().parents[2]
    assert data_dir() == repo.parent / "shared" / "data"


def test_wikitext_document_is_a_line_and_blank_lines_are_empty_documents(fake_data):
    docs = load_documents("wikitext2", "test")
    assert docs.texts == ["", " = Title =\n", "", " A b-c, d.\n"]
    assert docs.source == str(fake_data / "wikitext2" / "wiki.test.raw")
    assert (docs.split, docs.detokenizer) == ("test", "wikitext")


def test_ptb_document_is_a_stripped_line(fake_data):
    assert load_documents("ptb", "test").texts == ["no it wasn't", "", "the 1 cats"]


def test_lambada_records_skip_blank_lines_and_get_the_authors_newline(fake_data):
    assert load_documents("lambada", "test").texts == ['\nHe said "hi" to Bob', "\nTrailing space"]


def test_missing_local_file_and_unreachable_hub_is_one_line_error(fake_data):
    with pytest.raises(UserError, match=r"ptb validation: no local file .*ptb\.valid\.txt and huggingface\.co cannot"):
        load_documents("ptb", "validation")
    with pytest.raises(UserError, match=r"lm1b test: no local file .*news\.en\.heldout-00000-of-00050 and huggingface"):
        load_documents("lm1b", "test")


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
