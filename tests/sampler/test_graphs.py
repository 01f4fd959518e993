"""The step runner (sampler/graphs.py): which calls run eagerly, compiled or from a graph (graphs need CUDA:
tests/gpu/test_graphed_sampler.py), and the --graphs choices."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler.choices import resolve_graphs
from aogpt_plugin.sampler.graphs import StepRunner, uses_inductor


def test_auto_is_on_for_cuda_and_off_elsewhere():
    assert resolve_graphs("auto", "cuda") == "on" and resolve_graphs("auto", "cpu") == "off"
    assert resolve_graphs("compile", "cpu") == "compile"
    with pytest.raises(UserError, match="graphs='yes' is not supported; allowed: auto, on, off, compile, static"):
        resolve_graphs("yes", "cpu")
    assert uses_inductor("on", "cpu") and not uses_inductor("on", "cuda") and uses_inductor("compile", "cuda")
    assert not uses_inductor("static", "cpu")


def _counting(mode):
    """A runner whose eager and compiled functions log their calls."""
    calls = []
    runner = StepRunner(lambda x, scale: x * scale, mode, "cpu")
    eager, compiled = runner.fn, runner.compiled
    runner.fn = lambda *a: (calls.append("eager"), eager(*a))[1]
    if compiled is not None:
        runner.compiled = lambda *a: (calls.append("compiled"), compiled(*a))[1]
    return runner, calls


def test_static_mode_runs_every_call_eagerly():
    runner, calls = _counting("static")
    x = torch.ones(3)
    for _ in range(3):
        assert torch.equal(runner(("k", 2.0), x, 2.0), x * 2)
    assert calls == ["eager"] * 3 and runner.compiled is None


def test_on_a_cpu_a_key_runs_eagerly_once_then_compiled():
    """The first call of a key is its warm-up (and keeps one-off shapes from compiling); later calls of
    the key run the inductor-compiled step. Keys count separately."""
    runner, calls = _counting("on")
    x = torch.ones(3)
    for _ in range(3):
        runner(("a",), x, 2.0)
    assert calls == ["eager", "compiled", "compiled"]
    calls.clear()
    runner(("b",), x, 3.0)
    assert calls == ["eager"]


def test_without_cuda_nothing_is_captured():
    runner, _ = _counting("on")
    assert not runner.capture and runner.captured == 0 and runner.stream is None


@pytest.mark.parametrize("build", ["flex", "step"])
def test_compiling_raises_dynamos_limits_for_the_whole_process(build, monkeypatch):
    """A code object past `recompile_limit` runs eagerly for good, and eager flex cannot be captured: the
    first compiled flex (which every flex call of the process shares) or compiled step raises the limits
    before compiling, whichever path (the dynamic sampler's flex, the static step) comes first."""
    from aogpt_plugin.sampler import decoder, graphs

    config = torch._dynamo.config
    monkeypatch.setattr(decoder, "_compiled_flex", {})
    with config.patch(recompile_limit=8, accumulated_recompile_limit=1000):
        StepRunner(lambda x: x, "static", "cpu")  # nothing compiled: nothing changed
        assert config.recompile_limit == 8
        if build == "flex":
            decoder.compiled_flex_attention(per_shape=False)
        else:
            StepRunner(lambda x: x, "compile", "cpu")
        assert config.recompile_limit == graphs.RECOMPILE_LIMIT == 64
        assert config.accumulated_recompile_limit == 1000  # raised, never lowered
