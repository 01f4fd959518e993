"""Runs a static-shape step function by key: eagerly, compiled by inductor, or replayed from a CUDA graph.

Why: a decode step of a GPT-2-sized model is ~400 small kernels. Launched one by one from Python it
takes 12-13 ms on an H100 at any batch, ~100x its memory-bound time; replayed from a CUDA graph the
host launches it with one call and the GPU runs the kernels back to back.

A key is everything the step's trace depends on besides its tensors (the python-int shapes, the
sampling parameters); every call of a key passes the same tensors, at the same addresses. The first
call of a key runs eagerly: it is the warm-up that capture needs (cuBLAS workspaces, FlexAttention
compiled for the shape), and a shape needed once (a prompt's prefill) is never compiled or captured.
With inductor the second call compiles and runs the compiled step; the call after that (on CUDA)
captures it. Captured graphs share one memory pool: their inputs and outputs are the caller's
buffers or read before the next replay, so they may replay in any order.

Modes (options.GRAPHS): `static` runs every call eagerly; `on` captures the eager step on CUDA and
compiles it with inductor on a CPU (which has no graphs); `compile` compiles, then captures on CUDA.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from ..errors import UserError
from .compile_limits import raise_compile_limits
from .options import GRAPHS


def resolve_graphs(mode: str, device: torch.device | str) -> str:
    """`auto` -> `on` on CUDA (launch-bound there), `off` elsewhere (a CPU is compute-bound)."""
    if mode not in GRAPHS:
        raise UserError(f"graphs={mode!r} is not supported; allowed: {', '.join(GRAPHS)}")
    if mode == "auto":
        return "on" if torch.device(device).type == "cuda" else "off"
    return mode


def uses_inductor(mode: str, device: torch.device | str) -> bool:
    """Whether a resolved mode compiles the step with inductor (which packs its own Linear weights)."""
    return mode == "compile" or (mode == "on" and torch.device(device).type != "cuda")


def step_linears(mode: str, device: torch.device | str, backend: str = "auto", linears: str = "auto") -> str:
    """The Linear kernel a static step in a resolved `mode` runs with, or one UserError for what inductor
    cannot compile: it lowers aten Linears (and packs them itself), not oneDNN's packed ones, and on a CPU
    it cannot lower FlexAttention inside the step. The commands ask before loading any weights."""
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


def _addresses(args) -> tuple:
    return tuple(a.data_ptr() for a in args if isinstance(a, torch.Tensor))


class StepRunner:
    """`runner(key, *args)` runs `fn(*args)` the way the mode says and returns its output."""

    def __init__(self, fn: Callable, mode: str, device: torch.device | str):
        if mode not in ("static", "on", "compile"):
            raise ValueError(f"a step runner needs a static mode, got {mode!r}")
        self.fn, self.device = fn, torch.device(device)
        self.capture = self.device.type == "cuda" and mode in ("on", "compile")
        self.compiled = None
        if uses_inductor(mode, device):  # a graph per step shape (width bucket, rows drawn)
            raise_compile_limits()
            self.compiled = torch.compile(fn, fullgraph=True, dynamic=False)
        self.calls: Counter = Counter()
        self.graphs: dict = {}  # key -> (graph, output, input addresses)
        self.pool = None
        self.stream = torch.cuda.Stream(self.device) if self.capture else None

    def reset(self) -> None:
        """Forget every graph (the buffers they read were reallocated)."""
        self.graphs.clear()
        self.calls.clear()
        self.pool = None

    @property
    def captured(self) -> int:
        return len(self.graphs)

    def __call__(self, key, *args):
        entry = self.graphs.get(key)
        if entry is not None:
            graph, out, addresses = entry
            if addresses != _addresses(args):
                raise RuntimeError(f"step {key}: a captured step was called with other buffers")
            graph.replay()
            return out
        self.calls[key] += 1
        call = self.calls[key]
        if call == 1 or (self.compiled is None and not self.capture):
            return self._run(self.fn, args)
        if self.compiled is not None and (call == 2 or not self.capture):
            return self._run(self._compiled, args)
        return self._capture(key, self.fn if self.compiled is None else self._compiled, args)

    def _compiled(self, *args):
        return self.compiled(*args)

    def _run(self, fn, args):
        if not self.capture:
            return fn(*args)
        # warm-ups run on the capture stream, as CUDA graph capture requires
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = fn(*args)
        current.wait_stream(self.stream)
        return out

    def _capture(self, key, fn, args):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            out = fn(*args)
        if self.pool is None:
            self.pool = graph.pool()
        self.graphs[key] = (graph, out, _addresses(args))
        graph.replay()  # capture records without running: this call's step runs now
        return out
