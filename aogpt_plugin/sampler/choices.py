"""The sampler's choices for one run, resolved once for the device it runs on: how each decode step
runs (`--graphs`), the attention backend, the Linear kernel and the sampler (parallel or speculative).

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
from .options import BACKENDS, GRAPHS, LINEAR_KERNELS

PARALLEL, SPECULATIVE = "parallel", "speculative"


@dataclass(frozen=True)
class SamplerChoices:
    """What a run runs with, resolved: no `auto` left."""

    graphs: str  # off (the dynamic sampler) | static | on | compile (graphs.py; `on` only on CUDA)
    backend: str  # sdpa | flex
    linears: str  # aten | onednn
    sampler: str = PARALLEL  # parallel | speculative


def resolve_choices(
    graphs: str,
    backend: str,
    linears: str,
    device: torch.device | str,
    dtype: torch.dtype,
    head_dim: int | None = None,
    speculative: bool = False,
) -> SamplerChoices:
    """The run's choices on `device` for weights of `dtype` (a model with heads of `head_dim`)."""
    mode = resolve_graphs(graphs, device)
    kernel = resolve_linear_kernel(step_linears(graphs, device, backend, linears), device, dtype)
    return SamplerChoices(
        mode, resolve_backend(backend, device, head_dim), kernel, SPECULATIVE if speculative else PARALLEL
    )


def check_names(graphs: str, backend: str, linears: str) -> None:
    """The names alone, against their allowed lists, before a device is known (SampleConfig.validate)."""
    _check("backend", backend, BACKENDS)
    _check("linears", linears, LINEAR_KERNELS)
    _check("graphs", graphs, GRAPHS)


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
