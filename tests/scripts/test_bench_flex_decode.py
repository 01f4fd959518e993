"""scripts/bench_flex_decode.py runs every decode-attention setting of its product (layout x SPLIT_KV x
num_stages x num_warps), each with the first's output, names the fastest as `--decode-attention` takes it,
and refuses bad input in one line (on a GPU it is the decode-attention measurement of the GPU check, timed
by replaying a CUDA graph of its calls)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_flex_decode.py"
TINY = ("--batch", "2", "--heads", "2", "--slots", "128", "--filled", "30", "--rounds", "2", "--calls", "2")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_every_setting_is_timed_against_the_first_with_its_output():
    done = run(*TINY, "--splits", "default,2", "--stages", "default", "--warps", "default,4", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [v["decode_attention"] for v in result["variants"]] == [
        "full", "full,warps=4", "full,split=2", "full,split=2,warps=4",
        "partial", "partial,warps=4", "partial,split=2", "partial,split=2,warps=4",
    ]  # fmt: skip
    assert result["variants"][1] | {"split": "default", "stages": "default", "warps": 4} == result["variants"][1]
    assert result["timer"] == "host"  # a CPU: no device to time apart (a GPU: "graph")
    assert result["variants"][0]["vs_first"] == 1.0 and all(v["us_per_call"] > 0 for v in result["variants"])
    assert all(v["max_abs_diff"] <= 1e-5 for v in result["variants"])  # the same attention, float32 on a CPU
    fastest = min(result["variants"], key=lambda v: v["us_per_call"])
    assert result["best"] == fastest["decode_attention"]
    assert result["command"].startswith("python scripts/bench_flex_decode.py --batch 2")


def test_a_setting_that_fails_or_is_past_the_budget_is_a_row_and_the_rest_are_timed(monkeypatch, capsys):
    """A SPLIT_KV the GPU's torch rejects, or compiles past the budget, must not cost the other rows of a scarce
    GPU run."""
    sys.path.insert(0, str(SCRIPT.parent))
    import bench_flex_decode

    real = bench_flex_decode.attend_fn

    def attend_fn(device, setting, *args):
        if setting.split == 2:
            raise ValueError("SPLIT_KV=2 is not supported\nsecond line")
        return real(device, setting, *args)

    monkeypatch.setattr(bench_flex_decode, "attend_fn", attend_fn)
    tiny = [*TINY[:-4], "--rounds", "1", "--calls", "1", "--stages", "default", "--warps", "default"]
    assert bench_flex_decode.main([*tiny, "--layouts", "partial", "--splits", "2,default"]) == 0
    out = capsys.readouterr().out
    assert "| partial,split=2 | failed: ValueError: SPLIT_KV=2 is not supported | | |" in out
    assert "| partial | " in out and "1.000 [1.000, 1.000]" in out and "fastest: partial" in out
    clock = itertools.chain([0.0, 0.0], itertools.repeat(5.0))  # the first setting compiled, then 5 s of 1 s gone
    monkeypatch.setattr(bench_flex_decode.time, "monotonic", lambda: next(clock))
    assert bench_flex_decode.main([*tiny, "--layouts", "partial,full", "--splits", "default", "--budget", "1"]) == 0
    assert "| full | past the --budget of 1.0 s of compiling | | |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (("--layouts", "full,dense"), "--layouts 'full,dense' is not a comma list of full, partial"),
        (("--splits", "default,0"), "--splits 'default,0' is not a comma list of default and integers >= 1"),
        (("--warps", "3"), "decode_attention='full,warps=3': warps=3 is not in 1|2|4|8|16"),
        (("--slots", "64", "--filled", "64"), "--filled 64 must be in 0 .. 63"),
        (("--calls", "0"), "--calls 0 must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]
