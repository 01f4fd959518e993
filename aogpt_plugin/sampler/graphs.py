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

Modes (options.GRAPHS, resolved by choices.py): `static` runs every call eagerly; `on` captures the eager
step on CUDA (off CUDA it resolves to `compile`: a CPU has no graphs); `compile` compiles with inductor,
then captures on CUDA. Compiling raises Dynamo's recompile limits process-wide (`raise_compile_limits`).
A compile (seconds on a GPU, minutes for a large model on a CPU) is said on stderr with its time as it
happens, and its seconds are kept apart (`compile_seconds`), so a speed is the sampling's alone.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable

import torch


def uses_inductor(mode: str, device: torch.device | str) -> bool:
    """Whether `mode` compiles the step with inductor (which packs its own Linear weights)."""
    return mode == "compile" or (mode == "on" and torch.device(device).type != "cuda")


# Dynamo keeps one cache per code object, and every compiled flex wrapper of the process shares
# flex_attention's: a static step adds an entry per (batch, width) shape, the dynamic sampler a few more.
# A code object past `recompile_limit` (8 by default) runs eagerly from then on, and eager flex cannot be
# captured in a CUDA graph (it copies a host scalar), so one long process (an eval, a test session) that
# sampled many shapes failed its next capture. The limits are raised, never lowered, before a first compile.
RECOMPILE_LIMIT = 64


def raise_compile_limits() -> None:
    """Room for a compiled graph per step shape (the sampler's and flex's, decoder.py), process-wide."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)


STEADY_CALL = 3  # a key's first call runs eagerly, its second compiles (inductor), its third captures (CUDA)


def _addresses(args) -> tuple:
    return tuple(a.data_ptr() for a in args if isinstance(a, torch.Tensor))


class StepRunner:
    """`runner(key, *args)` runs `fn(*args)` the way the mode says and returns its output."""

    def __init__(self, fn: Callable, mode: str, device: torch.device | str, name: str = "step"):
        if mode not in ("static", "on", "compile"):
            raise ValueError(f"a step runner needs a static mode, got {mode!r}")
        self.fn, self.device, self.name = fn, torch.device(device), name
        self.compile_seconds = 0.0  # spent in first compiled calls (compiling, and running the step once)
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
        if self.compiled is not None and call == 2:
            return self._compile(key, args)
        if self.compiled is not None and not self.capture:
            return self._run(self._compiled, args)
        return self._capture(key, self.fn if self.compiled is None else self._compiled, args)

    def _compiled(self, *args):
        return self.compiled(*args)

    def _compile(self, key, args):
        """The first compiled call of `key`: inductor compiles the step (and runs it once), timed and said."""
        shape = tuple(k for k in key if isinstance(k, int)) if isinstance(key, tuple) else key
        started = time.perf_counter()
        out = self._run(self._compiled, args)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - started
        self.compile_seconds += seconds
        where = "" if self.device.type == "cuda" else f"; on a {self.device.type.upper()}: compiled step, no CUDA graph"
        print(
            f"compiled the {self.name} at shape {shape} with inductor in {seconds:.1f} s (not counted in tokens/s{where})",
            file=sys.stderr,
            flush=True,
        )
        return out

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
