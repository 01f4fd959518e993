"""scripts/bench_flex_decode.py runs every layout and SPLIT_KV asked for, each with the first's output,
and refuses bad input in one line (on a GPU it is the decode-attention measurement of the GPU check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_flex_decode.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_every_variant_is_timed_against_the_first_with_its_output():
    tiny = ("--batch", "2", "--heads", "2", "--slots", "65", "--filled", "30", "--rounds", "2", "--calls", "2")
    done = run(*tiny, "--splits", "default,2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(v["layout"], v["split"]) for v in result["variants"]] == [
        ("full", "default"), ("full", "2"), ("partial", "default"), ("partial", "2"),
    ]  # fmt: skip
    assert result["variants"][0]["vs_first"] == 1.0 and all(v["us_per_call"] > 0 for v in result["variants"])
    assert all(v["max_abs_diff"] <= 1e-5 for v in result["variants"])  # the same attention, float32 on a CPU
    assert result["command"].startswith("python scripts/bench_flex_decode.py --batch 2")


def test_a_variant_that_fails_is_a_row_with_its_error_and_the_rest_are_timed(monkeypatch, capsys):
    """A SPLIT_KV the GPU's torch rejects must not cost the other rows of a scarce GPU run."""
    sys.path.insert(0, str(SCRIPT.parent))
    import bench_flex_decode

    real = bench_flex_decode.attend_fn

    def attend_fn(device, layout, split, *args):
        if split == "2":
            raise ValueError("SPLIT_KV=2 is not supported\nsecond line")
        return real(device, layout, split, *args)

    monkeypatch.setattr(bench_flex_decode, "attend_fn", attend_fn)
    tiny = ["--batch", "2", "--heads", "2", "--slots", "65", "--filled", "30", "--rounds", "1", "--calls", "1"]
    assert bench_flex_decode.main([*tiny, "--layouts", "partial", "--splits", "2,default"]) == 0
    out = capsys.readouterr().out
    assert "| partial | 2 | failed: ValueError: SPLIT_KV=2 is not supported | | |" in out
    assert "| partial | default | " in out and "1.000 [1.000, 1.000]" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (("--layouts", "full,dense"), "--layouts 'full,dense' is not a comma list of full, partial"),
        (("--splits", "default,0"), "--splits 'default,0' is not a comma list of default and integers >= 1"),
        (("--slots", "64", "--filled", "64"), "--filled 64 must be in 0 .. 63"),
        (("--calls", "0"), "--calls 0 must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]
