"""scripts/gpu_check.sh in its CPU mode: every step runs (the gpu tests skip), the benches write their
JSON, and the summary says so -- the proof that the one GPU command works before a GPU is lent."""

from __future__ import annotations

import json
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
    assert {s["step"] for s in summary["steps"]} >= {
        "pytest_gpu",
        "bench_train_cpu",
        "bench_sampler_cpu",
        "bench_graphs_cpu",
    }
    assert summary["pytest_gpu"]["skipped"] == summary["pytest_gpu"]["tests"] > 0  # every CUDA test skips here
    assert summary["benches"]["bench_train_debugmodel"]["mfu"] is None
    assert summary["benches"]["bench_sampler_b1"]["n"] == 16
    assert summary["benches"]["bench_graphs_static_cpu"]["graphs"] == "static"
    assert (tmp_path / "gpu_check.log").read_text().count("exit 0") == len(summary["steps"])
