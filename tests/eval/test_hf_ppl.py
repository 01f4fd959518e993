"""`aogpt eval ppl --model hf:DIR`: a Hugging Face GPT-2 on the same packed chunks, scoring the n-1 tokens
after each chunk's first (the authors' GPT-2 rule), checked against the model's own loss; offline."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import ROOT

pytest.importorskip("transformers")

from aogpt_plugin.cli import main  # noqa: E402
from aogpt_plugin.data.tokenizer import TiktokenTokenizer  # noqa: E402
from aogpt_plugin.eval.benchmarks import pack_documents  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from make_tiny_gpt2 import make_tiny_gpt2  # noqa: E402

SEQ = 16


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return make_tiny_gpt2(str(tmp_path_factory.mktemp("hf") / "tiny-gpt2"), layers=1, dim=32, positions=32)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "docs.jsonl"
    docs = [f"Document {i}: the cat sat on the mat, and {i} dogs ran far away." for i in range(6)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path, docs


def test_hf_model_scores_the_tokens_after_each_chunks_first_like_its_own_loss(capsys, gpt2_dir, text_file):
    import transformers

    path, docs = text_file
    argv = ["eval", "ppl", "--model", f"hf:{gpt2_dir}", "--dataset", str(path), "--order", "l2r"]
    assert main([*argv, "--seq-len", str(SEQ), "--batch-size", "3", "--json", "--no-progress"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    chunks = pack_documents(docs, TiktokenTokenizer("gpt2"), SEQ).chunks
    model = transformers.AutoModelForCausalLM.from_pretrained(gpt2_dir).eval()
    with torch.no_grad():
        losses = [float(model(input_ids=c[None], labels=c[None]).loss) for c in chunks]  # mean over n-1 shifted
    assert record["chunks"] == len(chunks) and record["tokens"] == len(chunks) * (SEQ - 1)
    assert record["scored_per_chunk"] == SEQ - 1 and record["model_kind"] == "hf"
    assert record["nll"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert record["bits_per_byte"] > 0 and record["nll_se_orders"] == 0.0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--order", "random"], "reads left to right only"),
        (["--order", "l2r", "--seq-len", "64"], "--seq-len 64 is above the 32 positions"),
    ],
)
def test_hf_errors_are_one_line(capsys, gpt2_dir, text_file, extra, message):
    argv = ["eval", "ppl", "--model", f"hf:{gpt2_dir}", "--dataset", str(text_file[0]), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_an_hf_model_that_cannot_load_is_one_line(capsys, tmp_path, text_file):
    argv = ["eval", "ppl", "--model", f"hf:{tmp_path / 'nothing'}", "--dataset", str(text_file[0]), "--order", "l2r"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load" in err[0], err
