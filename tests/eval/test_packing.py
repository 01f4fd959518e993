"""Packing: EOS after every document, one stream, only the final partial chunk dropped; and the
document / token / chunk counts of the benchmark files in ../shared/data."""

import pytest
import torch

from aogpt_plugin.data.tokenizer import TiktokenTokenizer
from aogpt_plugin.eval.benchmarks import BENCHMARKS, data_dir, load_documents
from aogpt_plugin.eval.packing import pack_documents

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
    monkeypatch.delenv("AOGPT_DATA_DIR", raising=False)
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
