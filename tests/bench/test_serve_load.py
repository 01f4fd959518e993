"""`aogpt bench serve`: its fixed request mix fits the model and varies what it should; under load (slow: two
server processes, interleaved rounds) every response equals its offline result and the row has its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from aogpt_plugin.bench.serve_load import mixed_completions


def test_the_request_mix_is_fixed_fits_the_positions_and_mixes_lengths_suffixes_and_infills():
    bodies = mixed_completions(60, 32, 61)
    assert bodies == mixed_completions(60, 32, 61)
    for i, body in enumerate(bodies):
        suffix = len(body.get("suffix", "").split())
        assert len(body["prompt"]) + body["max_tokens"] + suffix <= 32 and body["seed"] == i
        for span in body.get("infill", []):
            assert len(body["prompt"]) <= span["start"] < len(body["prompt"]) + body["max_tokens"] - 1
    gaps = [b["max_tokens"] for b in bodies]
    assert min(gaps) <= 4 and max(gaps) >= 20  # lengths far apart: what fixed batches pay for
    assert sum("suffix" in b for b in bodies) >= 10 and sum("infill" in b for b in bodies) >= 5


@pytest.mark.slow
def test_bench_serve_checks_every_response_against_its_offline_result():
    pytest.importorskip("fastapi")
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "bench", "serve", "--flavor", "tiny", "--requests", "12"]
    cmd += ["--n", "32", "--slots", "4", "--clients", "6", "--rounds", "2", "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout)
    assert row["same_as_offline"] is True and len(row["rounds"]) == 2
    for batching in ("continuous", "fixed"):
        figures = row[batching]
        assert figures["tokens_per_second"]["median"] > 0 and 0 < figures["occupancy"]["median"] <= 1
        assert figures["latency_p99"]["median"] >= figures["latency_p50"]["median"] > 0
    assert row["tokens_per_second_ratio"] > 0 and row["command"].startswith("aogpt bench serve --flavor tiny")
