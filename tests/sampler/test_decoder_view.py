"""The sampler's view of a model: same samples with either Linear kernel, the caller's model
untouched, parameters shared, and never stale after the weights change in place; packed Linears
equal F.linear, the kernel choice and its errors; adaLN tables equal the adaLN of each target."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import kernel_ops, needs_onednn, tiny_model

import aogpt_plugin.model.model as model_module
from aogpt_plugin.errors import UserError
from aogpt_plugin.model.args import GPT2_BACKBONE
from aogpt_plugin.sampler import SampleConfig, generate
from aogpt_plugin.sampler.choices import resolve_linear_kernel
from aogpt_plugin.sampler.decoder import (
    BlockModulation,
    FusedBlock,
    ModulationTable,
    PackedLinear,
    TabledAOGPT,
    build_view,
    decode_model,
    modulation_table,
    tabulate_modulation,
)


def _close_traces(a, b):
    for x, y in zip(a.trace, b.trace, strict=True):
        torch.testing.assert_close(x.logits, y.logits, atol=2e-4, rtol=1e-4)


@needs_onednn
@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_onednn_and_aten_sample_the_same_tokens(conditioning):
    model = tiny_model(conditioning, seed=3, preset="sampler")

    def run(linears):
        config = SampleConfig(length=23, steps=7, num_samples=3, counts="binomial", seed=5, linears=linears)
        return generate(model, config, record=True)

    aten, onednn = run("aten"), run("onednn")
    assert torch.equal(aten.tokens, onednn.tokens)
    _close_traces(aten, onednn)


@needs_onednn
def test_view_shares_parameters_and_leaves_the_model_alone():
    model = tiny_model("adaln", seed=1, preset="sampler")
    view = decode_model(model, "onednn")
    assert view is decode_model(model, "onednn")  # built once, then reused
    assert view.model is not model and view.tabled and view.linears == "onednn"
    assert all(type(m) not in (PackedLinear, ModulationTable) for m in model.modules())
    assert isinstance(view.model.output, PackedLinear)
    assert isinstance(view.model.layers["0"].attention.wqkv, PackedLinear)
    assert view.model.tok_embeddings.weight is model.tok_embeddings.weight
    assert view.model.layers["0"].attention_norm.weight is model.layers["0"].attention_norm.weight
    aten = decode_model(model, "aten")
    assert type(aten.model.output) is nn.Linear and aten.model.output.weight is model.output.weight


@needs_onednn
def test_a_tied_head_is_packed_from_the_token_embedding():
    """GPT-2's backbone: no `output` module; the view packs the embedding as the head, shared, not copied
    into the model, and samples what the unpacked view samples."""
    model = tiny_model("adaln", seed=1, preset="sampler", **GPT2_BACKBONE)
    assert model.output is None and model.layers["0"].attention.q_norm is None
    view = decode_model(model, "onednn")
    assert isinstance(view.model.output, PackedLinear) and model.output is None
    assert view.model.output.bias is None and view.model.output.out_features == model.model_args.padded_vocab_size
    config = SampleConfig(length=23, steps=7, num_samples=3, counts="binomial", seed=5)
    runs = [generate(model, dataclasses.replace(config, linears=k), record=True) for k in ("aten", "onednn")]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    _close_traces(*runs)


@pytest.mark.parametrize("linears", ["aten", pytest.param("onednn", marks=needs_onednn)])
@pytest.mark.parametrize(
    "backbone, changed",
    [
        ("paper", "output.weight"),
        ("paper", "layers.1.adaln.weight"),
        ("paper", "target_embeddings.weight"),
        ("gpt2", "tok_embeddings.weight"),  # the tied head's weight
        ("gpt2", "layers.0.attention_norm.weight"),  # a LayerNorm (its bias starts at 0)
    ],
)
def test_weights_written_in_place_are_picked_up(linears, backbone, changed):
    """A model that keeps training (or loads new weights) must never sample with the old ones."""
    extra = GPT2_BACKBONE if backbone == "gpt2" else {}
    model = tiny_model("adaln", seed=1, preset="sampler", **extra)
    config = SampleConfig(length=20, steps=5, num_samples=2, seed=2, linears=linears)
    before = generate(model, config, record=True)
    with torch.no_grad():
        model.get_parameter(changed).mul_(-1.5)
    after = generate(model, config, record=True)
    fresh = tiny_model("adaln", seed=1, preset="sampler", **extra)
    fresh.load_state_dict(model.state_dict())
    reference = generate(fresh, dataclasses.replace(config), record=True)
    assert not torch.equal(before.trace[0].logits, after.trace[0].logits)
    assert torch.equal(after.tokens, reference.tokens)
    _close_traces(after, reference)


# ---- Linear kernels ----------------------------------------------------------------------------
@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (7, 64), (3, 5, 64)])
def test_packed_linear_equals_f_linear(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias)
    x = torch.randn(shape)
    torch.testing.assert_close(PackedLinear(linear.weight, linear.bias)(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
def test_packed_linear_takes_non_contiguous_input():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(4, 64, 6).transpose(1, 2)  # (4, 6, 64), not contiguous
    torch.testing.assert_close(PackedLinear(linear.weight, linear.bias)(x), linear(x))


@needs_onednn
def test_kernel_choice():
    assert resolve_linear_kernel("auto", "cpu", torch.float32) == "onednn"
    assert resolve_linear_kernel("auto", "cpu", torch.bfloat16) == "aten"
    assert resolve_linear_kernel("aten", "cpu", torch.float32) == "aten"


@pytest.mark.parametrize(
    "kernel,dtype,message",
    [
        ("mkl", torch.float32, "linears='mkl' is not supported; allowed: auto, aten, onednn"),
        ("onednn", torch.bfloat16, "linears='onednn' needs float32 on a CPU with oneDNN"),
    ],
)
def test_bad_kernel_is_one_line_error(kernel, dtype, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        resolve_linear_kernel(kernel, "cpu", dtype)
    assert "\n" not in str(info.value)


def test_sample_config_names_a_bad_kernel():
    with pytest.raises(UserError, match="linears='fast' is not supported"):
        SampleConfig(length=8, steps=2, linears="fast").validate(max_positions=40)


# ---- adaLN tables ------------------------------------------------------------------------------
def test_table_rows_equal_adaln_of_each_target():
    model = tiny_model("adaln", seed=2, preset="sampler")
    block = model.layers["1"]
    table = ModulationTable(block.adaln, model.target_embeddings)
    targets = torch.tensor([[0, 5, 39], [7, 7, 1]])
    expected = block.adaln(F.silu(model.target_embeddings(targets)))
    torch.testing.assert_close(table(targets.unsqueeze(-1)), expected)


def test_every_adaln_is_tabulated_and_other_conditionings_are_left_alone():
    view = build_view(tiny_model("adaln", preset="sampler"), "aten").model
    assert type(view) is TabledAOGPT and isinstance(view.block_modulation, BlockModulation)
    assert all(type(b) is FusedBlock and b.adaln is None for b in view.layers.values())
    assert isinstance(view.final_adaln, ModulationTable)
    for conditioning in ("none", "concat"):
        model = tiny_model(conditioning, preset="sampler")
        assert not tabulate_modulation(model)
        assert model.final_adaln is None and type(model) is not TabledAOGPT


def test_one_gather_gives_every_blocks_adaln_with_one_plus_its_scales():
    """Layer i's rows are block i's adaLN of each target, its two scales (chunks 1 and 4 of 6) plus one, and
    all layers' rows come from one kernel: a step pays one launch for the conditioning of every block."""
    model = tiny_model("adaln", seed=2, preset="sampler")
    view = build_view(model, "aten").model
    targets = torch.tensor([[0, 5, 39], [7, 7, 1]])
    rows = view.block_modulation(targets.unsqueeze(-1))
    one_plus_scales = torch.zeros(6 * model.model_args.dim).view(6, -1)
    one_plus_scales[[1, 4]] = 1
    for block, got in zip(model.layers.values(), rows, strict=True):
        expected = block.adaln(F.silu(model.target_embeddings(targets)))
        torch.testing.assert_close(got, expected + one_plus_scales.flatten())
    targets = targets.unsqueeze(-1)
    assert kernel_ops(lambda: view.block_modulation(targets)) == ["index_select"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_fused_block_is_the_block_in_six_ops_fewer(dtype):
    """The view's block (fed its rows of 1 + scale, addcmul for each modulation and gated residual) gives the
    training block's output to rounding, with 6 aten ops fewer than the training formulas on a table (4
    mul/add of the two modulations, 2 of the gates; the row gather counted in both): the launches a GPU
    decode step saves per layer."""
    model = tiny_model("adaln", seed=4, preset="sampler").to(dtype)
    view = build_view(model, "aten").model
    block, fused = model.layers["1"], view.layers["1"]
    torch.manual_seed(0)
    x = torch.randn(2, 5, model.model_args.dim, dtype=dtype)
    targets = torch.tensor([[0, 5, 39, 2, 3], [7, 7, 1, 0, 9]]).unsqueeze(-1)
    cond = model.condition(targets[..., 0])
    with torch.no_grad():
        expected = block(x, cond)
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
        torch.testing.assert_close(fused(x, view.block_modulation(targets)[1]), expected, **tol)
        fused_ops = kernel_ops(lambda: fused(x, view.block_modulation(targets)[1]))
        table = modulation_table(block.adaln, model.target_embeddings)  # the training formulas, one gather of a table
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(
                model_module, "modulation_rows", lambda adaln, c, k: F.embedding(c.targets, table).chunk(k, -1)
            )
            torch.testing.assert_close(block(x, cond), expected)
            training_ops = kernel_ops(lambda: block(x, cond))
    assert len(fused_ops) == len(training_ops) - 6, (training_ops, fused_ops)
    assert fused_ops.count("addcmul") == 4 and "addcmul" not in training_ops


def test_the_views_head_is_the_models_in_two_ops_fewer():
    """The view's head (final table of 1 + scale, one addcmul) gives the model's logits to rounding."""
    model = tiny_model("adaln", seed=4, preset="sampler")
    view = build_view(model, "aten").model
    torch.manual_seed(0)
    h = torch.randn(2, 5, model.model_args.dim)
    targets = torch.tensor([[0, 5, 39, 2, 3], [7, 7, 1, 0, 9]])
    with torch.no_grad():
        expected = model.head(h, model.condition(targets))
        torch.testing.assert_close(view.head(h, targets.unsqueeze(-1)), expected, atol=1e-5, rtol=1e-5)
    with torch.inference_mode():  # as the sampler runs it (rms_norm one op, not its decomposition)
        ops = kernel_ops(lambda: view.head(h, targets.unsqueeze(-1)))
    assert "addcmul" in ops and "mul" not in ops and "add" not in ops, ops
