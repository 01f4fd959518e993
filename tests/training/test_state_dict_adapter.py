"""state_dict_adapter.py: weights written in the authors' layout (`checkpoint.last_save_in_hf`) carry the
head's padded rows masked, so the authors' code, which samples over every row, never draws a padded id."""

from __future__ import annotations

import glob

import pytest
import torch
from conftest import debug_train_args, run_torchrun, tiny_model

from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

from aogpt_plugin.model.authors_names import from_authors_names, to_authors_names  # noqa: E402
from aogpt_plugin.training.state_dict_adapter import MASKED_BIAS, AOGPTStateDictAdapter  # noqa: E402


def _padded_mass(model, authors_state) -> float:
    """The probability the authors' sampler gives the padded ids: a softmax over every head row."""
    model.load_state_dict(from_authors_names(authors_state))
    x = torch.randint(0, model.model_args.vocab_size, (4, 16), generator=torch.Generator().manual_seed(0))
    order = torch.stack([torch.randperm(16, generator=torch.Generator().manual_seed(i)) for i in range(4)])
    with torch.no_grad():
        probs = torch.softmax(model(x, order).double(), dim=-1)
    return float(probs[..., model.model_args.vocab_size :].sum(-1).max())


def test_the_padded_head_rows_get_no_probability_in_the_authors_layout():
    """Reported: with training ignoring the padded rows they keep their initial weights and carry about 1%
    of the probability per token; the authors' sampler drew a padded id in 92% of 256-token samples."""
    model = tiny_model(vocab_size=61)  # head padded to 64 rows
    ours = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():  # what an untrained padded row looks like next to trained ones: comparable logits
        ours["output.bias"][61:] = ours["output.bias"][:61].max()
    plain = to_authors_names(ours)
    assert _padded_mass(tiny_model(vocab_size=61), plain) > 1e-2  # the fault: real mass on padded ids

    written = AOGPTStateDictAdapter(model.model_args, None).to_hf(ours)
    bias = written["lm_head.bias"]
    assert torch.equal(bias[:61], ours["output.bias"][:61]) and (bias[61:] == MASKED_BIAS).all()
    assert torch.isfinite(bias).all() and torch.isfinite(bias.half()).all()  # finite in every export dtype
    assert (ours["output.bias"][61:] != MASKED_BIAS).all()  # the live weights are not touched
    assert _padded_mass(tiny_model(vocab_size=61), written) < 1e-30
    assert torch.equal(written["lm_head.weight"], plain["lm_head.weight"])


def test_nothing_is_masked_when_the_vocabulary_fills_the_head():
    model = tiny_model(vocab_size=64)
    written = AOGPTStateDictAdapter(model.model_args, None).to_hf(model.state_dict())
    assert torch.equal(written["lm_head.bias"], model.state_dict()["output.bias"])


@pytest.mark.slow
def test_a_sharded_two_process_run_saves_the_authors_layout_masked(tmp_path):
    """Under FSDP the head bias is a sharded DTensor; the saved file holds the masked rows."""
    from safetensors.torch import load_file

    dump = tmp_path / "run"
    args = debug_train_args(dump, 2, **{"checkpoint.interval": 100, "validation.freq": 100})
    proc = run_torchrun(
        ["aogpt_plugin.train", *args, "--checkpoint.last_save_in_hf", "--checkpoint.last_save_model_only"], 2
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(dump / "checkpoint" / "step-2" / "*.safetensors"))
    bias = load_file(path)["lm_head.bias"]
    assert bias.shape == (50304,) and (bias[50257:] == MASKED_BIAS).all() and bias[:50257].abs().max() < 1
