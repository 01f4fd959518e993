"""Generation perplexity pieces: sample files in every accepted layout, the summary statistics, the
causal scorers' token accounting, and direct vs retokenized ids."""

import json
import math

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.errors import UserError
from aogpt_plugin.eval.genppl import prepare, summarize, unigram_entropy
from aogpt_plugin.eval.samples import read_samples
from aogpt_plugin.eval.scorers import AOGPTScorer, shifted_nll_sums
from aogpt_plugin.model_dir import save_model


def write(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_sampler_json_layout_columns_become_samples(tmp_path):
    path = write(
        tmp_path, "s.json", {"tokens": [[1, 2], [3, 4, 5]], "text": ["a", "b"], "steps": 8, "tokenizer": "gpt2"}
    )
    s = read_samples(path)
    assert [x.tokens for x in s.samples] == [[1, 2], [3, 4, 5]]
    assert [x.text for x in s.samples] == ["a", "b"]
    assert s.meta == {"steps": 8} and s.tokenizer == "gpt2"
    bad = write(tmp_path, "bad.json", {"tokens": [[1], [2]], "text": ["only one"]})
    with pytest.raises(UserError, match="does not match 'tokens'"):
        read_samples(bad)


def test_sampler_json_with_samples_list_and_columns(tmp_path):
    record = {"samples": [{"tokens": [1, 2], "text": "a"}], "tokens": [[1, 2]], "text": ["a"], "tokenizer": "gpt2"}
    s = read_samples(write(tmp_path, "s.json", {**record, "steps": 4, "seed": 0}))
    assert [(x.tokens, x.text) for x in s.samples] == [([1, 2], "a")]
    assert s.meta == {"steps": 4, "seed": 0}


def test_other_layouts(tmp_path):
    assert [x.text for x in read_samples(write(tmp_path, "a.txt", "one\nline two\n\n\nthree\n")).samples] == [
        "one\nline two",
        "three",
    ]
    jsonl = write(tmp_path, "b.jsonl", '{"tokens": [1, 2]}\n\n{"text": "hi"}\n')
    assert [(x.tokens, x.text) for x in read_samples(jsonl).samples] == [([1, 2], None), (None, "hi")]
    listed = write(tmp_path, "c.json", [[5, 6], "text", {"tokens": [7], "text": "t"}])
    assert [(x.tokens, x.text) for x in read_samples(listed).samples] == [([5, 6], None), (None, "text"), ([7], "t")]
    wrapped = write(tmp_path, "d.json", {"samples": [[1]], "temperature": 0.9})
    assert read_samples(wrapped).meta == {"temperature": 0.9}
    with pytest.raises(UserError, match="holds no samples"):
        read_samples(write(tmp_path, "e.txt", "\n\n"))
    with pytest.raises(UserError, match="not a list of integers"):
        read_samples(write(tmp_path, "f.json", [{"tokens": ["x"]}]))


def test_unigram_entropy():
    assert unigram_entropy([4, 4, 4]) == 0.0
    assert unigram_entropy([1, 2, 3, 4]) == pytest.approx(math.log(4))
    assert unigram_entropy([1, 1, 2, 2]) == pytest.approx(math.log(2))


def test_summary_mean_of_per_sample_ppl_and_token_level_ppl():
    sums = torch.tensor([2.0, 12.0], dtype=torch.float64)
    counts = torch.tensor([2, 4])
    out = summarize(sums, counts, [[1, 2], [3, 3, 3, 3]])
    assert out["sample_ppls"] == pytest.approx([math.e, math.e**3])
    assert out["sample_ppl_mean"] == pytest.approx((math.e + math.e**3) / 2)
    assert out["sample_ppl_std"] == pytest.approx(abs(math.e - math.e**3) / math.sqrt(2))
    assert out["nll"] == pytest.approx(14 / 6) and out["ppl"] == pytest.approx(math.exp(14 / 6))
    assert out["tokens"] == 6 and out["samples"] == 2
    assert out["unigram_entropy_mean"] == pytest.approx(math.log(2) / 2)


def test_hf_style_scoring_skips_the_first_token_and_padding():
    logits = torch.randn(2, 4, 5)
    ids = torch.tensor([[1, 2, 3, 4], [0, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    sums, counts = shifted_nll_sums(logits, ids, mask)
    logp = torch.log_softmax(logits, -1)
    assert counts.tolist() == [3, 1]
    assert sums[1].item() == pytest.approx(-logp[1, 0, 3].item(), rel=1e-5)
    assert sums[0].item() == pytest.approx(-sum(logp[0, j, ids[0, j + 1]].item() for j in range(3)), rel=1e-5)


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    path = tmp_path_factory.mktemp("scorer") / "m"
    save_model(tiny_model(vocab_size=50257, max_seq_len=16, dim=32, preset="eval"), str(path))
    return AOGPTScorer(str(path), "cpu", torch.float32)


def test_aogpt_scorer_scores_all_tokens_and_padding_cannot_change_a_sample(scorer):
    a, b = [5, 6, 7, 8, 9], [11, 12]
    sums, counts = scorer.nll_sums([a, b])
    alone, _ = scorer.nll_sums([b])
    assert counts.tolist() == [5, 2]
    assert sums[1].item() == pytest.approx(alone[0].item(), rel=1e-5)


def test_direct_ids_when_tokenizers_match_else_retokenized(tmp_path, scorer):
    path = write(tmp_path, "s.json", {"tokens": [[464, 3797]], "text": ["The cat sat"], "tokenizer": "gpt2"})
    s = read_samples(path)
    direct = prepare(s, scorer)
    assert (direct.mode, direct.ids) == ("direct", [[464, 3797]])
    again = prepare(s, scorer, "retokenize")
    assert again.mode == "retokenized" and again.ids == [scorer.encode(["The cat sat"])[0]]
    assert again.own_tokens == [[464, 3797]]  # entropy stays on the samples' own tokens
    with pytest.raises(UserError, match="outside the 50257-token vocabulary"):
        prepare(read_samples(write(tmp_path, "big.json", [[50300]])), scorer)
