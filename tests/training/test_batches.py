"""The order-wrapping dataloader: what the Trainer receives, and exact resume of the order stream."""

from __future__ import annotations

import torch
from conftest import TRAIN_CORPUS

from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

import aogpt_plugin  # noqa: E402
from aogpt_plugin.data.tokenizer import TiktokenTokenizer  # noqa: E402
from aogpt_plugin.training.titan022.config_parser import parse_job_config  # noqa: E402
from aogpt_plugin.training.titan022.data import build_ordered_dataloader  # noqa: E402

aogpt_plugin.register()


def _loader(rank=0, world=1, order="mixture", path=None, shuffle=0, extra=()):
    cfg = parse_job_config(
        [
            *extra,
            "--aogpt.shuffle_windows",
            str(shuffle),
            "--job.config_file",
            "train_configs/aogpt_debug.toml",
            "--training.seq_len",
            "32",
            "--training.local_batch_size",
            "3",
            "--aogpt.order",
            order,
            "--training.dataset_path",
            str(path or TRAIN_CORPUS / "enwiki2015_heldout.jsonl"),
        ]
    )
    return build_ordered_dataloader(world, rank, TiktokenTokenizer("gpt2"), cfg)


def test_batches_hold_tokens_orders_and_gathered_labels():
    batch, labels = next(iter(_loader()))
    x, order = batch["input"], batch["order"]
    assert x.shape == order.shape == labels.shape == (3, 32)
    assert torch.equal(labels, torch.gather(x, 1, order))
    for row in order:
        assert sorted(row.tolist()) == list(range(32))


def test_the_fused_loss_path_hands_the_model_its_labels_and_the_same_batches():
    """`[aogpt] loss_path = "fused"`: the model's forward takes the labels (it returns the summed loss), so the
    batch holds them beside the tokens and orders, which are the logits path's."""
    (logits_batch, logits_labels), (batch, labels) = (
        next(iter(_loader(extra=("--aogpt.loss_path", path)))) for path in ("logits", "fused")
    )
    assert set(logits_batch) == {"input", "order"} and set(batch) == {"input", "order", "labels"}
    assert torch.equal(batch["labels"], labels) and torch.equal(labels, logits_labels)
    assert torch.equal(batch["input"], logits_batch["input"]) and torch.equal(batch["order"], logits_batch["order"])


def test_eos_ends_every_document_and_windows_pack_across_documents(tmp_path):
    import json

    tok = TiktokenTokenizer("gpt2")
    docs = [f"Document number {i} says hello." for i in range(40)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    stream = [t for d in docs for t in tok.encode(d, add_eos=True)]
    batch, labels = next(iter(_loader(order="l2r", path=tmp_path)))
    # torchtitan packs windows of seq_len + 1 tokens; AO uses the first seq_len of each
    for i in range(3):
        assert batch["input"][i].tolist() == stream[i * 33 : i * 33 + 32]
    assert torch.equal(labels, batch["input"])  # left-to-right labels are the tokens themselves


def test_state_dict_resumes_the_same_tokens_and_orders():
    loader = _loader()
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    expected = [next(it) for _ in range(3)]
    fresh = _loader()
    fresh.load_state_dict(state)
    got = [b for b, _ in zip(fresh, range(3), strict=False)]
    for (eb, el), (gb, gl) in zip(expected, got, strict=True):
        assert torch.equal(eb["input"], gb["input"]) and torch.equal(eb["order"], gb["order"])
        assert torch.equal(el, gl)


def test_ranks_read_different_data_and_orders():
    a, _ = next(iter(_loader(0, 2)))
    b, _ = next(iter(_loader(1, 2)))
    assert not torch.equal(a["input"], b["input"]) and not torch.equal(a["order"], b["order"])


def test_a_shuffle_buffer_mixes_windows_and_resumes_exactly(tmp_path):
    import json

    tok = TiktokenTokenizer("gpt2")
    docs = [f"Document number {i} says hello, and then it says goodbye to everyone." for i in range(300)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    stream = [t for d in docs for t in tok.encode(d, add_eos=True)]
    windows = [tuple(stream[i * 33 : i * 33 + 32]) for i in range(len(stream) // 33)]
    position = {w: i for i, w in enumerate(windows)}
    plain = _loader(order="l2r", path=tmp_path)
    drawn = [position[tuple(r.tolist())] for (b, _), _ in zip(plain, range(4), strict=False) for r in b["input"]]
    assert drawn == list(range(12))  # torchtitan: consecutive windows
    loader = _loader(order="l2r", path=tmp_path, shuffle=16)
    it = iter(loader)
    first = [position[tuple(r.tolist())] for _ in range(4) for r in next(it)[0]["input"]]
    assert sorted(first) != first and len(set(first)) == 12 and max(first) < 16 + 12  # a random draw from the buffer
    state = loader.state_dict()
    expected = [next(it)[0]["input"] for _ in range(3)]
    fresh = _loader(order="l2r", path=tmp_path, shuffle=16)
    fresh.load_state_dict(state)
    got = [b["input"] for (b, _), _ in zip(fresh, range(3), strict=False)]
    assert all(torch.equal(e, g) for e, g in zip(expected, got, strict=True))  # buffer and stream resumed


def test_the_curriculum_reads_left_to_right_first_and_resumes_exactly():
    """`--aogpt.l2r_curriculum_steps 3` with 2 micro-batches of 3 per step (global batch 6): the 6 sequences of
    step 1 are read left to right, later steps mix; a loader restored from another's state draws the same
    tokens and orders (the step of a sequence comes from its index, which the state holds)."""
    extra = ["--aogpt.l2r_curriculum_steps", "3", "--aogpt.p_l2r", "0", "--training.global_batch_size", "6"]
    loader = _loader(extra=extra)
    it = iter(loader)
    batches = [next(it)[0] for _ in range(8)]  # steps 1-4, two micro-batches each
    l2r = [[torch.equal(row, torch.arange(32)) for row in b["order"]] for b in batches]
    assert l2r[0] == l2r[1] == [True] * 3  # step 1: share 1.0
    assert not any(l2r[6] + l2r[7])  # step 4: the curriculum is over, p_l2r = 0
    state_loader = _loader(extra=extra)
    it = iter(state_loader)
    for _ in range(3):
        next(it)
    state = state_loader.state_dict()
    fresh = _loader(extra=extra)
    fresh.load_state_dict(state)
    got = [b for (b, _), _ in zip(fresh, range(5), strict=False)]
    for expected, resumed in zip(batches[3:], got, strict=True):
        assert torch.equal(expected["input"], resumed["input"]) and torch.equal(expected["order"], resumed["order"])
