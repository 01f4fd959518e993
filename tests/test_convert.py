"""convert.py without a checkpoint run: model args read off parameter shapes, and the step folder chosen."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.convert import infer_model_args, resolve_step_dir
from aogpt_plugin.errors import UserError


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
@pytest.mark.parametrize("overrides", [{}, {"target_pe_dim": 16, "n_heads": 2, "bias": False, "mlp_ratio": 2}])
def test_infer_model_args_recovers_every_hyper_parameter(conditioning, overrides):
    if conditioning != "adaln":
        overrides = {k: v for k, v in overrides.items() if k != "target_pe_dim"}  # only adaLN has the table
    model = tiny_model(conditioning, vocab_size=70, **overrides)  # 70 tokens, embedding padded to 128
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    inferred = infer_model_args(shapes, vocab_size=70)
    assert inferred == model.model_args
    assert inferred.padded_vocab_size == 128


def test_infer_model_args_keeps_an_unusual_padding():
    args = dataclasses.replace(tiny_model().model_args, vocab_size=61, vocab_multiple=100)  # embedding 100 rows
    shapes = {k: v.shape for k, v in tiny_model(vocab_size=61, vocab_multiple=100).state_dict().items()}
    inferred = infer_model_args(shapes, vocab_size=61)
    assert inferred.padded_vocab_size == args.padded_vocab_size == 100


def test_infer_model_args_names_what_is_wrong():
    with pytest.raises(UserError, match="no aogpt parameter 'tok_embeddings.weight'"):
        infer_model_args({"weight": torch.Size([2, 2])}, vocab_size=10)
    shapes = {k: v.shape for k, v in tiny_model().state_dict().items()}
    with pytest.raises(UserError, match="tokenizer vocabulary 50257 is larger than the checkpoint's embedding"):
        infer_model_args(shapes, vocab_size=50257)


def _step(root, n: int, complete: bool):
    d = root / f"step-{n}"
    d.mkdir()
    if complete:
        (d / ".metadata").write_bytes(b"")
    return d


def test_resolve_step_dir_picks_the_newest_complete_step(tmp_path):
    _step(tmp_path, 10, True)
    _step(tmp_path, 20, True)
    _step(tmp_path, 30, False)  # a save that was killed: no .metadata
    assert resolve_step_dir(str(tmp_path), None) == (str(tmp_path / "step-20"), 20)
    assert resolve_step_dir(str(tmp_path), 10) == (str(tmp_path / "step-10"), 10)
    assert resolve_step_dir(str(tmp_path / "step-10"), None) == (str(tmp_path / "step-10"), 10)


@pytest.mark.parametrize(
    ("layout", "step", "message"),
    [
        ("missing", None, "does not exist"),
        ("empty", None, "holds neither a DCP checkpoint"),
        ("incomplete", None, r"has step folders \[5\] but none is complete"),
        ("complete", 7, r"--step 7 not found .*available: \[5\]"),
        ("step_dir", 6, "--step 6 disagrees with"),
    ],
)
def test_resolve_step_dir_errors_are_one_line(tmp_path, layout, step, message):
    root = tmp_path / "ckpt"
    if layout != "missing":
        root.mkdir()
    if layout in ("incomplete", "complete", "step_dir"):
        _step(root, 5, layout != "incomplete")
    target = root / "step-5" if layout == "step_dir" else root
    with pytest.raises(UserError, match=message) as info:
        resolve_step_dir(str(target), step)
    assert "\n" not in str(info.value)
