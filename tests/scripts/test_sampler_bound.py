"""scripts/sampler_bound.py: the roofline arithmetic behind the GPU sampler goals (docs/benchmarks.md)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from sampler_bound import bound, main  # noqa: E402


def test_the_small_model_bounds_on_an_h100():
    """247 MB of bf16 weights plus the live KV: 79 us at batch 1; the encoder's forward is compute-bound,
    so encoder/AO reaches 27x only at n = 1024 and batch 32, and stays under 25x at n = 256."""
    one = bound("small", 1024, 1, "h100")
    assert one["ao_mb"] == pytest.approx(266.0, abs=0.1) and one["ao_us"] == pytest.approx(79.4, abs=0.1)
    assert bound("small", 1024, 32, "h100")["ratio"] == pytest.approx(27.1, abs=0.1)
    assert max(bound("small", 256, b, "h100")["ratio"] for b in (1, 8, 32, 64)) < 25
    ratios = [bound("small", 1024, b, "h100")["ratio"] for b in (1, 8, 32, 128)]
    assert ratios == sorted(ratios)  # the weights are shared by the batch, the encoder's FLOPs are not


def test_the_launch_floor_and_the_quarter_step():
    """154 kernels x 2.4 us = 370 us: above the memory bound of `small` at every batch to 32 on an H200, so a
    step of that many kernels cannot reach the bound; the T=n/4 step reads the same bytes (its 8 query slots'
    FLOPs stay under them), so at the floors AR/AO(T=n/4) is 4x; with fewer kernels the floor is the bound."""
    b1, b32 = bound("small", 1024, 1, "h200"), bound("small", 1024, 32, "h200")
    assert b1["launch_us"] == pytest.approx(369.6) and b1["ao_floor_us"] == b32["ao_floor_us"] == b1["launch_us"]
    assert b32["ao_us"] == pytest.approx(177.3, abs=0.1) and b32["quarter_us"] == pytest.approx(b32["ao_us"])
    assert b32["ratio_floor"] == pytest.approx(18.6, abs=0.1) and b1["ar_quarter_floor"] == pytest.approx(4.0)
    few = bound("small", 1024, 32, "h200", kernels=50)
    assert few["ao_floor_us"] == pytest.approx(b32["ao_us"]) and few["ratio_floor"] == pytest.approx(b32["ratio"])


def test_the_table_prints(capsys):
    assert main(["--flavors", "small", "--n", "1024", "--batch", "32"]) == 0
    out = capsys.readouterr().out
    assert "launch floor 154 kernels x 2.4 us = 370 us a step" in out
    assert (
        "| small, 1024 | 32 | 851.1 -> 254.1 | 370 | 254.1 (370) | 6,879 (9,439) | 27.1x (37.2x) | 18.6x | 4.00x |"
        in out
    )
