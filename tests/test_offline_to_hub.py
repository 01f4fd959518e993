"""The issue's acceptance criterion, end to end: "A fresh-clone test: prepare a tiny corpus, train offline
from it, export, load with `transformers` (no aogpt import in that process), equal logits."

Through the CLI, as a user on a machine without network would run it, everything written under tmp:
`aogpt data prepare` turns 40 paragraphs of the OpenWebText sample (training text) and 8 held-out
Wikipedia articles (validation) into folders; the launcher trains the debug recipe 4 steps from them
with the hub and datasets offline and the Hugging Face caches in tmp; `aogpt export CKPT OUT` writes the
checkpoint's EMA weights; a `python -I` process that cannot import aogpt_plugin or torchtitan loads OUT
with transformers (tests/helpers/hf_load.py). Its float32 logits for a fixed token batch, left to right
and in a fixed random order, equal bit for bit (one thread on both sides) those of OUT loaded by aogpt and
of `aogpt convert CKPT OUT2`, the same weights through the other path.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from conftest import HELDOUT, SHARED_DATA, debug_train_args, launch_train, load_with_transformers

from aogpt_plugin.cli import main
from aogpt_plugin.model_dir import load_model_dir

if importlib.util.find_spec("transformers") is None:
    pytest.skip("the loading side needs transformers (pip install -e '.[eval]')", allow_module_level=True)

OWT_SAMPLE = SHARED_DATA / "openwebtext_sample" / "openwebtext_sample.txt"
STEPS = 4


def _cli(capsys, argv: list[str]) -> dict:
    """`aogpt ARGV` in this process; the JSON record it prints last."""
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    return json.loads(out.out.splitlines()[-1])


def test_a_prepared_corpus_trains_offline_and_transformers_loads_the_export_with_equal_logits(
    tmp_path, capsys, one_cpu_thread
):
    missing = [str(p) for p in (OWT_SAMPLE, HELDOUT) if not p.is_file()]
    if missing:
        pytest.skip(f"no local corpus at {missing}")
    paragraphs = [p.strip() for p in OWT_SAMPLE.read_text(encoding="utf-8").split("\n\n") if p.strip()][:40]
    (tmp_path / "owt.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    with HELDOUT.open(encoding="utf-8") as f:
        articles = [json.loads(next(f))["text"] for _ in range(8)]
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in articles))

    # 1. prepare: a training and a validation folder (text shards + aogpt-data.json)
    train_dir, val_dir = tmp_path / "train", tmp_path / "val"
    for source, folder, n in ((tmp_path / "owt.txt", train_dir, 40), (tmp_path / "heldout.jsonl", val_dir, 8)):
        assert main(["data", "prepare", str(source), str(folder)]) == 0
        assert f"prepared {n} documents" in capsys.readouterr().out

    # 2. train offline from them: no hub, no ~/.cache (the datasets cache is tmp's, and it is used)
    hf_home = tmp_path / "hf_home"
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(hf_home),
        "HF_DATASETS_CACHE": str(hf_home / "datasets"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    data = {
        "training.dataset": "local",
        "training.dataset_path": str(train_dir),
        "validation.dataset": "local",
        "validation.dataset_path": str(val_dir),
    }
    proc = launch_train(debug_train_args(tmp_path / "run", STEPS, **data), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert f"step:  {STEPS}" in log and f"aogpt validation step {STEPS}" in log, log[-3000:]
    assert any((hf_home / "datasets").rglob("*.arrow"))

    # 3. export the newest checkpoint's EMA weights; convert the same checkpoint
    ckpt, hf, converted = tmp_path / "run" / "checkpoint", tmp_path / "hf", tmp_path / "converted"
    record = _cli(capsys, ["export", str(ckpt), str(hf), "--weights", "ema"])
    assert record == {"out_dir": str(hf), "step": STEPS, "weights": "ema"}
    record = _cli(capsys, ["convert", str(ckpt), str(converted)])
    assert record == {"out_dir": str(converted), "step": STEPS, "weights": "ema"}

    # 4. transformers, in a process without aogpt, against both of aogpt's readings
    ours, theirs = load_model_dir(str(hf)), load_model_dir(str(converted))
    vocab, n = ours.args.vocab_size, 32  # the trained sequence length
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (2, n), generator=g)
    order = torch.stack([torch.randperm(n, generator=g) for _ in range(2)])
    texts = [paragraphs[0][:300], articles[0][:300]]
    cases = {"trained": {"dir": str(hf), "texts": texts}}
    out = load_with_transformers(cases, {"trained/tokens": tokens, "trained/order": order}, tmp_path / "loader")

    with torch.no_grad():
        for model in (ours.model, theirs.model):
            l2r, any_order = model(tokens)[..., :vocab], model(tokens, order)[..., :vocab]
            assert out["trained/l2r"].dtype == torch.float32 and out["trained/l2r"].shape == (2, n, vocab)
            assert torch.equal(out["trained/l2r"], l2r)
            assert torch.equal(out["trained/order"], any_order)
    assert not torch.equal(l2r, any_order)  # the order reached the model
    tok = ours.tokenizer()
    assert out["trained/ids"] == [tok.encode(t) for t in texts]
    assert out["trained/decoded"] == [tok.decode(tok.encode(t)) for t in texts]
