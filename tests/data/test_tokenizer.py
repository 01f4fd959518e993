"""Tokenizers named by one spec: GPT-2 (tiktoken), a trained tokenizer.json, bare symbols; their byte
counts (for bits per byte) are exact."""

from __future__ import annotations

import pytest
from conftest import HELDOUT

from aogpt_plugin.data.text_files import iter_documents
from aogpt_plugin.data.tokenizer import JsonTokenizer, check_tokenizer_spec, load_tokenizer
from aogpt_plugin.data.tokenizer_training import train_tokenizer
from aogpt_plugin.errors import ConfigError, UserError

TEXT = "Any-order GPT: 3.14 ‘quotes’, émigré, 東京 and  spaces.\nSecond line."


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "tok300.json"
    result = train_tokenizer(str(HELDOUT), 300, str(out), max_bytes=300_000)
    assert result["vocab_size"] == 300
    return str(out)


def test_a_trained_tokenizer_round_trips_text_and_ends_documents(trained):
    tok = load_tokenizer(trained)
    assert isinstance(tok, JsonTokenizer) and tok.get_vocab_size() == 300
    ids = tok.encode(TEXT, add_eos=True)
    assert ids[-1] == tok.eos_id and tok.decode(ids[:-1]) == TEXT
    assert tok.encode_batch([TEXT, "x"], add_eos=True)[0] == ids


@pytest.mark.parametrize("spec", ["gpt2", "trained"])
def test_byte_lengths_count_the_utf8_bytes_the_ids_spell(spec, trained):
    tok = load_tokenizer(trained if spec == "trained" else spec)
    lengths = tok.byte_lengths()
    for text in (TEXT, next(iter_documents(str(HELDOUT)))[:5000]):
        ids = tok.encode(text, add_eos=True)
        assert int(lengths[ids].sum()) == len(text.encode("utf-8"))  # EOS spells no bytes


def test_symbols_are_integers_written_out():
    tok = load_tokenizer("symbols:32")
    assert tok.get_vocab_size() == 32 and tok.decode([3, 31, 0]) == "3 31 0" and tok.encode("3 31 0") == [3, 31, 0]
    with pytest.raises(UserError, match="has symbols 0..31"):
        tok.encode("32")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cl100k", "aogpt.tokenizer='cl100k' is not a tokenizer; allowed: gpt2, a tokenizer.json path, symbols:V"),
        ("/no/such/tok.json", "no such tokenizer.json"),
        ("symbols:x", "give the number of symbols"),
    ],
)
def test_bad_specs_are_one_line(spec, message):
    with pytest.raises(ConfigError, match=message):
        check_tokenizer_spec(spec)


def test_a_json_that_is_not_a_tokenizer_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError, match="is not a tokenizer.json"):
        load_tokenizer(str(tmp_path / "x.json"))
