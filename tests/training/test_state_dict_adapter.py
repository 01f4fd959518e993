"""state_dict_adapter.py: weights written in the authors' layout (`checkpoint.last_save_in_hf`) carry the
head's padded rows masked, so the authors' code, which samples over every row, never draws a padded id;
a GPT-2 folder read through `initial_load_in_hf` starts training exactly where the GPT-2 ends, in one
process and sharded over two."""

from __future__ import annotations

import glob

import pytest
import torch
from conftest import (
    GPT2_TINY_FLAVOR,
    debug_train_args,
    error_lines,
    first_windows,
    gpt2_loss,
    gpt2_start_args,
    launch_train,
    recorded_losses,
    run_torchrun,
    tiny_gpt2,
    tiny_model,
)

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


# ---- GPT-2 in: --checkpoint.initial_load_path HF_DIR --checkpoint.initial_load_in_hf ---------------------------
def _converted(dump, out, weights: str) -> str:
    from aogpt_plugin.convert import convert

    convert(str(dump / "checkpoint"), str(out), weights=weights)
    return str(out)


def test_training_starts_where_the_gpt2_ends(tmp_path):
    """On GPT-2's backbone the first step on left-to-right batches has transformers' loss for those batches;
    the step reaches the conditioning (adaLN leaves the identity), and the EMA starts at the GPT-2."""
    pytest.importorskip("transformers")
    from aogpt_plugin.model_dir import load_model_dir

    gpt2 = tiny_gpt2(tmp_path / "hf", **GPT2_TINY_FLAVOR)
    dump = tmp_path / "run"
    proc = launch_train(gpt2_start_args(dump, tmp_path / "hf", 1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert abs(recorded_losses(dump)[1] - gpt2_loss(gpt2, first_windows(32, 4))) < 1e-5
    raw, ema = (load_model_dir(_converted(dump, tmp_path / w, w)).model for w in ("raw", "ema"))
    adaln = raw.layers["0"].adaln
    assert adaln.weight.abs().max() > 0 and not torch.equal(adaln.bias[2 * 128 : 3 * 128], torch.ones(128))
    loaded = gpt2.transformer.h[0].attn.c_attn.weight.t()
    moved = raw.layers["0"].attention.wqkv.weight - loaded
    assert moved.abs().max() > 1e-4  # the step changed it
    # the first EMA update (warm-up: decay 2/11) from the GPT-2's weights, not from a random init
    torch.testing.assert_close(ema.layers["0"].attention.wqkv.weight, loaded + moved * 9 / 11, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_compiled_and_checkpointed_blocks_start_where_the_gpt2_ends(tmp_path):
    """GPT-2's blocks (LayerNorm, tanh GELU) under per-block torch.compile and full activation checkpointing."""
    pytest.importorskip("transformers")
    gpt2 = tiny_gpt2(tmp_path / "hf", **GPT2_TINY_FLAVOR)
    extra = {"compile.enable": True, "activation_checkpoint.mode": "full"}
    proc = launch_train(gpt2_start_args(tmp_path / "run", tmp_path / "hf", 1, **extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert abs(recorded_losses(tmp_path / "run")[1] - gpt2_loss(gpt2, first_windows(32, 4))) < 1e-5


def test_a_gpt2_folder_that_does_not_fit_is_one_line_before_any_process(tmp_path):
    """Through the launcher: the preflight names both values and nothing is created."""
    pytest.importorskip("transformers")
    tiny_gpt2(tmp_path / "hf", **{**GPT2_TINY_FLAVOR, "n_layer": 2})
    proc = launch_train(gpt2_start_args(tmp_path / "run", tmp_path / "hf", 1))
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "has layers n_layer=2 but model.flavor='gpt2-tiny' has n_layers=4" in line, line
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_two_fsdp_processes_load_the_gpt2_exactly(tmp_path):
    """Under FSDP each rank keeps its shard of the GPT-2 (DTensors laid out as the live ones, the tied head in
    the root's unit). A learning rate of 1e-30 leaves the weights as loaded (to 1e-20: a zero moves to 1e-30):
    the first checkpoint, raw and EMA, is `aogpt convert --from-hf`'s folder but for adaLN's target table
    (the run's own init)."""
    pytest.importorskip("transformers")
    from aogpt_plugin.convert import convert, convert_from_hf
    from aogpt_plugin.model_dir import load_model_dir

    tiny_gpt2(tmp_path / "hf", **GPT2_TINY_FLAVOR)
    dump = tmp_path / "run"
    args = gpt2_start_args(dump, tmp_path / "hf", 1, **{"optimizer.lr": 1e-30, "training.local_batch_size": 2})
    proc = run_torchrun(["aogpt_plugin.train", *args], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    convert_from_hf(str(tmp_path / "hf"), str(tmp_path / "converted"))
    want = load_model_dir(str(tmp_path / "converted")).model.state_dict()
    for weights in ("raw", "ema"):
        convert(str(dump / "checkpoint"), str(tmp_path / weights), weights=weights)
        got = load_model_dir(str(tmp_path / weights)).model.state_dict()
        assert got.keys() == want.keys()
        differ = [k for k in want if not torch.allclose(got[k], want[k], atol=1e-20, rtol=0)]  # 0 + 1e-30 != 0
        assert differ == ["target_embeddings.weight"], (weights, differ)
