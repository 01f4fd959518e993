"""The run's choices (sampler/choices.py): the static step's FlexAttention setting (`--decode-attention`),
its spelling, its one-line errors, where it applies, and the arithmetic its default comes from:
FlexDecoding's work split replayed on the step's own BlockMasks through a 1024-step generation."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler.choices import (
    DEFAULT_DECODE_ATTENTION,
    parse_decode_attention,
    resolve_choices,
    resolve_decode_attention,
)
from aogpt_plugin.sampler.options import DecodeAttention
from aogpt_plugin.sampler.sampling import step_counts
from aogpt_plugin.sampler.static import plan_steps, static_decoder


@pytest.mark.parametrize(
    "text, kernel_options",
    [
        ("full", None),
        ("partial,split=4", {"SPLIT_KV": 4}),
        ("partial,split=8,stages=3,warps=4", {"SPLIT_KV": 8, "num_stages": 3, "num_warps": 4}),
        ("full,warps=8,backend=TRITON_DECODE", {"num_warps": 8, "BACKEND": "TRITON_DECODE"}),
    ],
)
def test_a_setting_is_spelled_as_it_is_given_and_sets_those_kernel_options(text, kernel_options):
    setting = parse_decode_attention(text)
    assert str(setting) == text and setting.kernel_options() == kernel_options
    assert setting.full_blocks == text.startswith("full")
    assert parse_decode_attention("auto") is None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("dense", "the layout 'dense' is not one of full, partial"),
        ("partial,split=0", "split=0 is not in 1..64"),
        ("partial,split=four", "split=four is not in 1..64"),
        ("partial,warps=3", "warps=3 is not in 1|2|4|8|16"),
        ("partial,stages=9", "stages=9 is not in 1..8"),
        ("partial,split=4,split=8", "split is given twice"),
        ("partial,tiles=2", "'tiles=2' is not KEY=VALUE with a key of split, stages, warps, backend"),
        ("partial,backend=CUDNN", "backend=CUDNN is not one of AUTO"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it_and_the_form(text, problem):
    with pytest.raises(UserError) as raised:
        parse_decode_attention(text)
    message = str(raised.value)
    assert message.startswith(f"decode_attention={text!r}: {problem}") and "\n" not in message
    assert message.endswith(
        "allowed: auto, or full|partial followed by any of ,split=N ,stages=N ,warps=N ,backend=NAME"
    )
    assert raised.value.field == "decode_attention"


def test_the_setting_applies_to_a_static_flex_step_only():
    """auto resolves to the default where the run has a static FlexAttention step and to nothing elsewhere;
    a setting given for a run without one is refused, as it would change nothing."""
    assert resolve_decode_attention("auto", "flex", "static") == DEFAULT_DECODE_ATTENTION
    assert resolve_decode_attention("auto", "flex", "off") is None
    assert resolve_decode_attention("auto", "sdpa", "compile") is None
    assert resolve_decode_attention("full", "flex", "on") == DecodeAttention("full")
    with pytest.raises(UserError, match=r"backend 'sdpa', graphs 'off'\); allowed with it: backend flex"):
        resolve_choices("auto", "auto", "auto", "cpu", torch.float32, 32, decode_attention="full")
    choices = resolve_choices("static", "flex", "auto", "cpu", torch.float32, 32)
    assert choices.decode_attention == DEFAULT_DECODE_ATTENTION and choices.decode_setting == "partial,split=4"
    assert resolve_choices("off", "flex", "auto", "cpu", torch.float32, 32).decode_setting is None


def _cdiv(a, b):
    return (a + b - 1) // b


def flex_decoding_tiles(block_mask, split_kv: int, block_n: int = 64) -> torch.Tensor:
    """The BLOCK_N-slot tiles each of FlexDecoding's SPLIT_KV programs walks, (B, H, SPLIT_KV), for a one-row
    query: torch's flex_decode template (torch/_inductor/kernel/flex/templates/flex_decode.py.jinja, the same
    split in 2.11 and 2.13) replayed. With full blocks listed a program's tile is the whole key length over
    SPLIT_KV; program t walks partial tiles [t, t + 1) of it and full tiles [S - t - 1, S - t), each up to
    the blocks listed; with none listed the tile is the listed (partial) blocks over SPLIT_KV. BLOCK_N is 64
    in torch's FlexDecoding configurations."""
    kv_len, sparse = block_mask.seq_lengths[1], block_mask.BLOCK_SIZE[1]
    multiple, cap = sparse // block_n, max(_cdiv(kv_len, block_n), 1)
    program = torch.arange(split_kv)
    partial = block_mask.kv_num_blocks[:, :, :1].long()  # the one query block's lists, (B, H, 1)
    full = block_mask.full_kv_num_blocks
    tile_kv = _cdiv(kv_len, split_kv) if full is not None else _cdiv(partial * sparse, split_kv)
    tile = _cdiv(tile_kv, block_n)  # TILE_KV_MULTIPLE: BLOCK_N tiles a program's share holds

    def walked(start, listed):
        end = torch.minimum(start + tile, torch.clamp(listed * multiple, max=cap))
        return torch.clamp(end - start, min=0)

    tiles = walked(program * tile, partial)
    if full is not None:  # the full blocks' pass, in reverse program order
        tiles = tiles + walked((split_kv - program - 1) * tile, full[:, :, :1].long())
    return tiles


def _step_masks(setting: DecodeAttention | None, n: int = 1024, batch: int = 32):
    """The static step's own BlockMask at every step of a T=n generation of n positions at `batch` (the state
    the device reaches set from the host plan, which the static tests check equal)."""
    model = tiny_model("adaln", preset="sampler", max_seq_len=n)
    state = static_decoder(model, batch, "flex", "aten", "static", setting)
    plan = plan_steps(
        step_counts([n] * batch, n, "linear", "deterministic", None), torch.zeros(batch, dtype=torch.long)
    )
    for k in range(plan.steps):
        state.cache_len.copy_(plan.cache_len[:, k])
        state.pending.copy_(plan.pending[:, k])
        width = plan.width[:, k]
        yield state.mask(state.arange(plan.shapes()[k][0]), width)


def test_work_split_of_the_default_setting_keeps_every_flexdecoding_program_short():
    """Where the default comes from (choices.DEFAULT_DECODE_ATTENTION). At n=1024 the cache holds 1152 slots, 9
    blocks of 128; a T=n step's query sees the blocks up to its own slot. FlexDecoding's programs each walk
    their 64-slot tiles in series, so a step lasts as long as its longest program. Torch's SPLIT_KV at batch 32
    x 12 heads on an H200 is 1: 9 tiles on average over a generation. The default's programs walk at most 3 at
    step 508 (the middle of the 2026-11-28 profile) and 2.5 on average; with full blocks listed at the same
    SPLIT_KV the filled tiles land unevenly (2, 0, 1 and 5 at step 508), which this test refuses."""
    split = DEFAULT_DECODE_ATTENTION.split
    longest: dict[tuple[str, int], list[int]] = {}
    at_508 = {}
    settings = {
        "default": DEFAULT_DECODE_ATTENTION,
        "full": DecodeAttention("full"),
        "partial": DecodeAttention("partial"),
    }
    for name, setting in settings.items():
        for step, mask in enumerate(_step_masks(setting)):
            for s in (1, 2, 4, 8):
                tiles = flex_decoding_tiles(mask, s)
                longest.setdefault((name, s), []).append(int(tiles.max()))
                if step == 508 and s == split:
                    at_508[name] = tiles[0, 0].tolist()
    average = {key: sum(v) / len(v) for key, v in longest.items()}
    for name in settings:  # the table of docs/benchmarks.md, shown with -s
        print(
            f"{name:8s} longest program, tiles on average: "
            + ", ".join(f"SPLIT_KV {s}: {average[name, s]:.2f}" for s in (1, 2, 4, 8))
        )
    print(f"step 508, SPLIT_KV {split}: default {at_508['default']}, full blocks {at_508['full']}")
    assert split == 4 and at_508["default"] == [2, 2, 2, 2] and max(at_508["default"]) <= 3
    assert average["default", split] == pytest.approx(2.5)
    assert at_508["full"] == [2, 0, 1, 5]  # the uneven layout: the replay tells them apart
    assert average["full", 1] == pytest.approx(9.0) and average["partial", 1] == pytest.approx(9.0)
    assert [round(average["partial", s], 2) for s in (2, 4, 8)] == [4.5, 2.5, 1.5]
    assert average["full", split] > average["default", split] + 1
