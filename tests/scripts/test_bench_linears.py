"""scripts/bench_linears.py runs, times every kernel asked for at every row count, and refuses bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_linears.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_reports_both_kernels_per_row_count():
    done = run("--flavor", "debugmodel", "--rows", "1,3", "--passes", "1", "--threads", "1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["threads"] == 1 and set(result["ms"]) == {"1", "3"}
    assert all(v["aten"] > 0 and v["onednn"] > 0 for v in result["ms"].values())


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch built without MKL")
def test_mkl_kernel_matches_rows_it_was_packed_for():
    done = run("--flavor", "debugmodel", "--rows", "2", "--passes", "1", "--threads", "1", "--kernels", "mkl", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kernels"] == ["mkl"] and result["ms"]["2"]["mkl"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--rows", "1,x"), "--rows '1,x' is not a comma-separated list of integers"),
        (("--kernels", "aten,cublas"), "--kernels 'aten,cublas' is not a comma list of aten, onednn, mkl"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]
