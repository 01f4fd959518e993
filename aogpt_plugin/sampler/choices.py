"""The sampler's choices for one run, resolved once for the device it runs on: how each decode step
runs (`--graphs`), the attention backend, the static step's FlexAttention (`--decode-attention`), the
Linear kernel and the sampler (parallel or speculative).

Why one place: gpt-fast decides its fast path once, in `main`. Here `resolve_choices` is that place:
`SampleRequest.plan` (the commands and the Python API), `generate` for a caller that hands it only a
SampleConfig, and the benchmark baselines call it before any weight is read or model is built, and
everything after reads the SamplerChoices it returns. Each choice's allowed list (options.py) is
checked here and nowhere else; a bad value or combination is one UserError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UserError
from .graphs import uses_inductor
from .options import (
    BACKENDS,
    DECODE_ATTENTION_FORM,
    DECODE_KNOBS,
    DECODE_LAYOUTS,
    GRAPHS,
    LINEAR_KERNELS,
    DecodeAttention,
)


@dataclass(frozen=True)
class SamplerChoices:
    """What a run runs with, resolved: no `auto` left."""

    graphs: str  # off (the dynamic sampler) | static | on | compile (graphs.py; `on` only on CUDA)
    backend: str  # sdpa | flex
    linears: str  # aten | onednn
    decode_attention: DecodeAttention | None = None  # the static step's FlexAttention; None: no such step

    @property
    def static_step(self) -> bool:
        """Whether each step runs static.py's step at fixed shapes (eager, compiled or replayed), not the
        dynamic loop: then a run's batch keeps one shape, and the step holds a full-length cache."""
        return self.graphs != "off"

    @property
    def decode_setting(self) -> str | None:
        """The static step's FlexAttention setting as a record spells it (None: the run has no such step)."""
        return None if self.decode_attention is None else str(self.decode_attention)


def resolve_choices(
    graphs: str,
    backend: str,
    linears: str,
    device: torch.device | str,
    dtype: torch.dtype,
    head_dim: int | None = None,
    decode_attention: str = "auto",
) -> SamplerChoices:
    """The run's choices on `device` for weights of `dtype` (a model with heads of `head_dim`)."""
    mode = resolve_graphs(graphs, device)
    kernel = resolve_linear_kernel(step_linears(graphs, device, backend, linears), device, dtype)
    attention = resolve_backend(backend, device, head_dim)
    return SamplerChoices(mode, attention, kernel, resolve_decode_attention(decode_attention, attention, mode))


def check_names(graphs: str, backend: str, linears: str, decode_attention: str = "auto") -> None:
    """The names alone, against their allowed lists, before a device is known (SampleConfig.validate)."""
    _check("backend", backend, BACKENDS)
    _check("linears", linears, LINEAR_KERNELS)
    _check("graphs", graphs, GRAPHS)
    parse_decode_attention(decode_attention)


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{name}={value!r} is not supported; allowed: {', '.join(allowed)}", name)


def resolve_graphs(mode: str, device: torch.device | str) -> str:
    """`auto` -> `on` on CUDA (launch-bound there), `off` elsewhere (a CPU is compute-bound); `on` off CUDA
    -> `compile`, which is what it runs there (inductor; a CPU has no graphs). Not `compile` on CUDA: 1.74x
    faster a step on an H200, but ~16 s of compiling first, repaid after ~25,000 steps (docs/benchmarks.md)."""
    _check("graphs", mode, GRAPHS)
    on_cuda = torch.device(device).type == "cuda"
    if mode == "auto":
        return "on" if on_cuda else "off"
    if mode == "on" and not on_cuda:
        return "compile"
    return mode


def step_linears(mode: str, device: torch.device | str, backend: str = "auto", linears: str = "auto") -> str:
    """The Linear kernel a static step in `mode` runs with, or one UserError for what inductor cannot
    compile: it lowers aten Linears (and packs them itself), not oneDNN's packed ones, and on a CPU it
    cannot lower FlexAttention inside the step."""
    _check("linears", linears, LINEAR_KERNELS)
    if not uses_inductor(mode, device):
        return linears
    if linears == "onednn":
        raise UserError(f"linears='onednn' cannot be compiled (graphs={mode!r}); allowed with it: auto, aten")
    if backend == "flex" and torch.device(device).type != "cuda":
        raise UserError(
            f"backend='flex' cannot be compiled into the step on {torch.device(device).type} (graphs={mode!r}: "
            "inductor lowers FlexAttention there only alone); allowed with it: sdpa, auto"
        )
    return "aten"


# Compiled flex on CPU (torch 2.13) returns wrong attention for head_dim 8 and 16 whenever the key
# length is not a multiple of 128 (checked against SDPA; 24, 32, 48, 64, 128 are right).
CPU_FLEX_MIN_HEAD_DIM = 24


def resolve_backend(backend: str, device: torch.device | str, head_dim: int | None = None) -> str:
    """`auto` -> sdpa on a CPU (faster there at every decode shape), flex elsewhere (it skips masked blocks)."""
    _check("backend", backend, BACKENDS)
    on_cpu = torch.device(device).type == "cpu"
    if backend == "auto":
        return "sdpa" if on_cpu else "flex"
    if backend == "flex" and on_cpu and head_dim is not None and head_dim < CPU_FLEX_MIN_HEAD_DIM:
        raise UserError(
            f"backend='flex' on CPU gives wrong results for head_dim={head_dim} in this torch "
            f"(needs head_dim >= {CPU_FLEX_MIN_HEAD_DIM}); use backend 'sdpa' or 'auto'"
        )
    return backend


def onednn_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def resolve_linear_kernel(kernel: str, device: torch.device | str, dtype: torch.dtype) -> str:
    """'auto' -> onednn for float32 on CPU (when torch has oneDNN), else aten (decoder.py packs the Linears)."""
    _check("linears", kernel, LINEAR_KERNELS)
    if kernel == "auto":
        return "onednn" if onednn_available(device, dtype) else "aten"
    if kernel == "onednn" and not onednn_available(device, dtype):
        raise UserError(
            f"linears='onednn' needs float32 on a CPU with oneDNN (got {dtype} on {torch.device(device)}); "
            "allowed here: auto, aten"
        )
    return kernel


# FlexDecoding splits each (sample, head)'s keys over SPLIT_KV programs; torch's SPLIT_KV is 2 x SMs / (batch x
# heads), 1 at batch 32 x 12 heads on an H200: 384 programs each walk the filled cache's 64-slot tiles in series
# (25.3 us a layer of the 2026-11-28 step, docs/benchmarks.md). Listed as full blocks, the tiles of a step split
# the whole cache, so the filled ones land unevenly: at step 508 of 1024, SPLIT_KV 4 gives its programs 2, 0, 1
# and 5 tiles. With every touched block partial they split only the touched ones: 2, 2, 2, 2, and the longest
# program walks 2.5 tiles on average over a generation, against 9 today (FlexDecoding's split replayed on the
# step's masks: `pytest tests/sampler/test_choices.py -k work_split -s`). Pipelining and warps stay torch's until a
# GPU measures them (scripts/bench_flex_decode.py).
DEFAULT_DECODE_ATTENTION = DecodeAttention("partial", split=4)
DECODE_KNOB_VALUES = {"split": range(1, 65), "stages": range(1, 9), "warps": (1, 2, 4, 8, 16)}


def flex_backends() -> tuple[str, ...]:
    """The BACKEND values the installed torch's FlexAttention takes (none before it had the option)."""
    import typing

    from torch.nn.attention import flex_attention

    return typing.get_args(getattr(flex_attention, "_Backend", None)) or ()


def parse_decode_attention(text: str) -> DecodeAttention | None:
    """`--decode-attention`'s setting (None for auto), or one UserError naming the bad part and the form."""

    def bad(problem: str) -> UserError:
        return UserError(f"decode_attention={text!r}: {problem}; allowed: {DECODE_ATTENTION_FORM}", "decode_attention")

    if not isinstance(text, str):
        raise UserError(
            f"decode_attention={text!r} is not a string; allowed: {DECODE_ATTENTION_FORM}", "decode_attention"
        )
    if text == "auto":
        return None
    layout, *knobs = text.split(",")
    if layout not in DECODE_LAYOUTS:
        raise bad(f"the layout {layout!r} is not one of {', '.join(DECODE_LAYOUTS)}")
    values: dict = {}
    for knob in knobs:
        key, _, value = knob.partition("=")
        if key not in DECODE_KNOBS or not value:
            raise bad(f"{knob!r} is not KEY=VALUE with a key of {', '.join(DECODE_KNOBS)}")
        if key in values:
            raise bad(f"{key} is given twice")
        if key == "backend":
            backends = flex_backends()
            if value not in backends:
                have = (
                    f"not one of {', '.join(backends)}" if backends else "not an option of this torch's FlexAttention"
                )
                raise bad(f"backend={value} is {have}")
            values[key] = value
            continue
        allowed = DECODE_KNOB_VALUES[key]
        if not value.isdigit() or int(value) not in allowed:
            span = f"{allowed[0]}..{allowed[-1]}" if isinstance(allowed, range) else "|".join(map(str, allowed))
            raise bad(f"{key}={value} is not in {span}")
        values[key] = int(value)
    return DecodeAttention(layout, **values)


def resolve_decode_attention(text: str, backend: str, mode: str) -> DecodeAttention | None:
    """The static step's FlexAttention setting for a run whose attention is `backend` and whose steps run
    `mode` (both resolved): `auto` -> DEFAULT_DECODE_ATTENTION where the run has such a step, None elsewhere;
    a setting given for a run without one is refused (it would change nothing)."""
    setting = parse_decode_attention(text)
    applies = backend == "flex" and mode != "off"
    if setting is None:
        return DEFAULT_DECODE_ATTENTION if applies else None
    if not applies:
        raise UserError(
            f"decode_attention={text!r} sets the static step's FlexAttention, and this run has none (backend "
            f"{backend!r}, graphs {mode!r}); allowed with it: backend flex with graphs on, compile or static, or "
            "decode_attention 'auto'",
            "decode_attention",
        )
    return setting
