"""scripts/gpu_check.sh in its CPU mode: every step runs (the gpu tests skip), the benches write their
JSON, and the summary says so -- the proof that the one GPU command works before a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
from conftest import ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the full GPU benches")
def test_cpu_mode_runs_every_step_and_writes_a_summary(tmp_path):
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "cpu" and summary["ok"] is True
    training = {"bench_train_debugmodel", "bench_train_debugmodel_b4", "bench_train_profile_debugmodel"}
    training.add("first_steps_aogpt_debug")
    steps = {"pytest_gpu", "bench_sampler_cpu", "bench_graphs_cpu", "bench_requests", "flex_decode_cpu", *training}
    steps.add("bench_graphs_autotune_cpu")
    assert {s["step"] for s in summary["steps"]} >= steps
    assert summary["pytest_gpu"]["skipped"] == summary["pytest_gpu"]["tests"] > 0  # every CUDA test skips here
    assert summary["benches"]["bench_train_debugmodel"]["mfu"] is None
    assert [summary["benches"][f"bench_train_debugmodel{b}"]["batch"] for b in ("", "_b4")] == [2, 4]
    profile = summary["benches"]["bench_train_profile_debugmodel"]["profile"]
    assert set(profile) == {"ar", "ao"} and profile["ao"]["categories"]["loss"]["ms_per_step"] > 0
    assert [(row["step"], row["loss"] > 10) for row in summary["first_steps_debug"]] == [(1, True), (2, True)]
    assert (tmp_path / "first_steps_aogpt_debug" / "tb").is_dir()  # the run's dump folder: in OUT, not left in /tmp
    assert summary["graph_break_log_lines"] == 0
    assert summary["benches"]["bench_sampler_b1"]["n"] == 16
    assert summary["benches"]["bench_graphs_static_cpu"]["graphs"] == "static"
    autotuned = summary["benches"]["bench_graphs_compile_autotune_cpu"]  # its command names the setting
    assert autotuned["command"].startswith("TORCHINDUCTOR_MAX_AUTOTUNE=1 aogpt bench sampler")
    requests = summary["benches"]["bench_requests"]  # mixed requests at batch 1 and 4: the same tokens
    assert requests["requests"] == 12 and requests["same_tokens_at_every_batch_size"] is True
    layouts = [v["layout"] for v in summary["flex_decode"]["flex_decode_cpu"]["variants"]]
    assert layouts == ["full", "full", "partial", "partial"]  # scripts/bench_flex_decode.py, both layouts
    profiled = summary["step_profiles"]["step_profile_cpu"]  # the static step's kernels (--step-profile), by T
    assert set(profiled) == {"16", "4"}  # T=1 has no step before a profile window
    assert all(p["launches_per_step"] > 0 and p["busy_us_per_step"] > 0 for p in profiled.values())
    log = (tmp_path / "gpu_check.log").read_text()
    assert log.count("exit 0") == len(summary["steps"])
    assert "timeout --kill-after=5 300 sh -c" in log  # each training step under its own timeout


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the full GPU benches")
def test_gpu_check_parts_select_the_training_steps(tmp_path):
    """`GPU_CHECK_PARTS=train_profile` runs the profile alone of the training part (and the CPU mode's
    sampler bench, which is not selectable there); a part that was not asked for leaves no step."""
    env = {**os.environ, "GPU_CHECK_PARTS": "train_profile"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["bench_train_profile_debugmodel", "bench_sampler_cpu"]
    assert "pytest_gpu" not in summary and summary["first_steps_debug"] == []
