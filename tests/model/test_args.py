"""Model args: validation messages and the FLOP count torchtitan uses for MFU."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.model import FLAVORS, AOGPTModelArgs


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_flops_per_token_match_a_flop_counter(conditioning):
    """6 x matmul params + 12 L d n per token, adaLN's Linears counted once per position of the micro-batch's
    tables, equals the fwd+bwd matmul/attention FLOPs a counter sees; counting adaLN per token (a micro-batch
    of one sequence) does not, for adaLN."""
    model = tiny_model(conditioning, max_seq_len=16)
    n, bsz = 16, 2
    tokens = torch.randint(0, 61, (bsz, n))
    order = torch.stack([torch.randperm(n) for _ in range(bsz)])
    # the math SDPA backend decomposes into bmm's the counter sees (the CPU flash kernel is not counted)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens, order=order).sum().backward()
    _, per_token = model.model_args.get_nparams_and_flops(model, n, micro_batch=bsz)
    # the counter sees causal SDPA as dense, exactly the convention torchtitan uses
    assert counter.get_total_flops() == pytest.approx(per_token * bsz * n, rel=1e-12)
    _, per_token_adaln = model.model_args.get_nparams_and_flops(model, n, micro_batch=1)
    assert (per_token_adaln == per_token) == (conditioning != "adaln")


def test_the_flop_count_reads_the_runs_micro_batch():
    """torchtitan calls get_nparams_and_flops(model, seq_len): the micro-batch comes from update_from_config."""
    from types import SimpleNamespace

    model = tiny_model("adaln", max_seq_len=16)
    args = model.model_args
    settings = SimpleNamespace(
        model=SimpleNamespace(flavor="tiny"), training=SimpleNamespace(seq_len=16, local_batch_size=4)
    )
    args.update_from_config(settings)
    assert args.micro_batch == 4 and "micro_batch" not in args.to_dict()
    assert args.get_nparams_and_flops(model, 16) == args.get_nparams_and_flops(model, 16, micro_batch=4)
    assert args.get_nparams_and_flops(model, 16)[1] < args.get_nparams_and_flops(model, 16, micro_batch=1)[1]


def test_param_count_of_paper_sizes():
    """Untied head and adaLN make the nominal 124M/350M models ~171M/426M (reference.md §1)."""
    with torch.device("meta"):
        from aogpt_plugin.model import AOGPT

        small = sum(p.numel() for p in AOGPT(FLAVORS["small"]).parameters())
        medium = sum(p.numel() for p in AOGPT(FLAVORS["medium"]).parameters())
    assert 170e6 < small < 172e6 and 425e6 < medium < 427e6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"conditioning": "film"}, "aogpt.conditioning='film' is not supported"),
        ({"dim": 30, "n_heads": 4}, "dim=30 must be divisible by n_heads=4"),
        ({"n_layers": 0}, "model.n_layers=0 must be >= 1"),
    ],
)
def test_bad_args_raise(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        AOGPTModelArgs(**kwargs)


def test_round_trip_dict():
    args = FLAVORS["tiny"]
    assert AOGPTModelArgs.from_dict(args.to_dict()) == args
    with pytest.raises(ConfigError, match="unknown model args"):
        AOGPTModelArgs.from_dict({**args.to_dict(), "rope": True})


def test_the_seq_len_rule_reads_the_same_in_update_from_config_as_in_preflight():
    """update_from_config said "this flavor's positions" with the flavor in parentheses; preflight
    and update_from_config now share check_positions."""
    from types import SimpleNamespace

    from aogpt_plugin.model.args import check_positions

    job = SimpleNamespace(training=SimpleNamespace(seq_len=4096), model=SimpleNamespace(flavor="debugmodel"))
    message = "training.seq_len=4096 is outside the positions of model.flavor='debugmodel'; allowed: 1..256"
    with pytest.raises(ConfigError) as info:
        AOGPTModelArgs(max_seq_len=256).update_from_config(job)
    assert str(info.value) == message
    with pytest.raises(ConfigError, match=r"^--length=0 is outside the positions of the model; allowed: 1\.\.8$"):
        check_positions("--length", 0, 8, "the model")
    check_positions("--length", 8, 8, "the model")


def test_conditioning_has_one_rule_for_the_config_section_and_the_model():
    from aogpt_plugin.model.args import check_conditioning

    with pytest.raises(
        ConfigError, match=r"^aogpt.conditioning='film' is not supported; allowed: adaln, concat, none$"
    ):
        check_conditioning("film")
    for name in ("adaln", "concat", "none"):
        check_conditioning(name)
