"""parallelize_fn pieces on one CPU process: float8 (emulated) swaps the block linears, AC wraps blocks."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

import aogpt_plugin  # noqa: E402
from aogpt_plugin.model.args import GPT2_BACKBONE  # noqa: E402
from aogpt_plugin.training.titan022.config_parser import parse_job_config  # noqa: E402

aogpt_plugin.register()


@pytest.mark.parametrize("backbone", ["paper", "gpt2"])
def test_float8_converter_applies_to_block_linears_not_head_or_adaln(backbone):
    from torchao.float8.float8_linear import Float8Linear
    from torchtitan.protocols.model_converter import build_model_converters

    cfg = parse_job_config(
        [
            "--job.config_file",
            "train_configs/aogpt_medium.toml",
            "--model.converters",
            "quantize.linear.float8",
            "--quantize.linear.float8.emulate",
        ]
    )
    cfg.compile.enable = False  # emulated float8 is eager-only off SM89
    model = tiny_model(dim=64, n_heads=4, vocab_size=61, **(GPT2_BACKBONE if backbone == "gpt2" else {}))

    class Dims:  # what the converter reads from ParallelDims
        dp_shard_enabled = False

    build_model_converters(cfg, Dims()).convert(model)
    block = model.layers["0"]
    for lin in (block.attention.wqkv, block.attention.wo, block.feed_forward.w1, block.feed_forward.w2):
        assert isinstance(lin, Float8Linear)
    assert not isinstance(block.adaln, Float8Linear) and not isinstance(model.output, Float8Linear)
    assert (model.output is None) == (backbone == "gpt2")  # GPT-2's tied head: the embedding, never converted
    out = model(torch.randint(0, 61, (2, 16)), order=torch.stack([torch.randperm(16) for _ in range(2)]))
    out.float().mean().backward()  # emulated float8 trains on CPU
    assert block.attention.wqkv.weight.grad is not None


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_keeps_outputs_and_grads(mode):
    from aogpt_plugin.training.titan022.parallelize import parallelize_aogpt

    argv = ["--job.config_file", "train_configs/aogpt_debug.toml", "--activation_checkpoint.mode", mode]
    cfg = parse_job_config([*argv, "--activation_checkpoint.selective_ac_option", "op"])  # op-level SAC, every block
    ref, ac = tiny_model(seed=1), tiny_model(seed=1)

    class Dims:
        tp_enabled = cp_enabled = pp_enabled = fsdp_enabled = dp_replicate_enabled = False

    parallelize_aogpt(ac, Dims(), cfg)
    assert "checkpoint" in type(ac.layers["0"]).__name__.lower()
    x = torch.randint(0, 61, (2, 12))
    order = torch.stack([torch.randperm(12) for _ in range(2)])
    ref(x, order=order).square().mean().backward()
    ac(x, order=order).square().mean().backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), ac.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


@pytest.mark.parametrize("key", ["tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree"])
def test_preflight_and_parallelize_share_one_parallelism_rule(key):
    """One rule, asked before the process group (preflight) and again by the parallelize_fn."""
    from aogpt_plugin.errors import ConfigError
    from aogpt_plugin.training.parallelize import check_parallelism
    from aogpt_plugin.training.preflight import check_settings
    from aogpt_plugin.training.titan022.config_parser import registered_names
    from aogpt_plugin.training.titan022.parallelize import parallelize_aogpt
    from aogpt_plugin.training.titan022.settings import run_settings

    cfg = parse_job_config(["--job.config_file", "train_configs/aogpt_debug.toml", f"--parallelism.{key}", "2"])
    message = f"parallelism.{key}=2 is not supported by aogpt; allowed: 1 (use FSDP/HSDP/DDP)"
    for check in (
        lambda: check_parallelism(cfg.parallelism),
        lambda: check_settings(run_settings(cfg), **registered_names()),
        lambda: parallelize_aogpt(tiny_model(), object(), cfg),
    ):
        with pytest.raises(ConfigError) as info:
            check()
        assert str(info.value) == message
