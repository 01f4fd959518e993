"""`aogpt bench sampler --step-profile FILE` (bench/decode_profile.py): the kernels of the static decode step,
per step and per kernel name, from the middle of a real generation."""

from __future__ import annotations

import argparse
import json

import pytest

from aogpt_plugin.bench import baselines
from aogpt_plugin.bench import sampler_speed as bench_command
from aogpt_plugin.bench.decode_profile import format_kernels, summarise_kernels
from aogpt_plugin.bench.step_profile import Work
from aogpt_plugin.errors import UserError


def parse(argv):
    parser = argparse.ArgumentParser()
    bench_command.add_to(parser.add_subparsers())
    return parser.parse_args(["sampler", *argv])


def test_kernels_are_summed_per_name_per_step_and_clipped_to_the_window():
    """Two steps in a window [0, 100) us: busy is the union of the kernels inside it (overlaps once, a kernel
    before the window left out, one across its end clipped), idle the rest, rows heaviest first."""
    works = [
        Work("gemm", "matmul", 0, 10, 30),
        Work("gemm", "matmul", 0, 50, 70),
        Work("add", "elementwise/norm", 0, 25, 35),  # overlaps the first gemm for 5 us
        Work("early", "elementwise/norm", 0, -20, -10),  # before the window
        Work("tail", "elementwise/norm", 0, 95, 120),  # clipped to 5 us
    ]
    out = summarise_kernels(works, [(0.0, 100.0)], steps=2, device_timeline=True)
    assert out["wall_us_per_step"] == 50 and out["busy_us_per_step"] == (20 + 5 + 20 + 5) / 2
    assert out["idle_us_per_step"] == 25 and out["launches_per_step"] == 2
    assert [(k["name"], k["launches_per_step"], k["us_per_step"], k["us_per_launch"]) for k in out["kernels"]] == [
        ("gemm", 1, 20, 20),
        ("add", 0.5, 5, 10),
        ("tail", 0.5, 2.5, 5),
    ]
    assert sum(k["fraction_of_busy"] for k in out["kernels"]) == pytest.approx(1, abs=1e-3)


def test_on_a_cpu_the_rows_are_operators_self_time():
    works = [Work("aten::mm", "matmul", 30), Work("aten::add", "elementwise/norm", 10), Work("aten::mm", "matmul", 30)]
    out = summarise_kernels(works, [(0.0, 100.0)], steps=1, device_timeline=False)
    assert out["busy_us_per_step"] == 70 and out["idle_us_per_step"] == 30
    assert out["kernels"][0] == {
        "name": "aten::mm",
        "category": "matmul",
        "launches_per_step": 2,
        "us_per_step": 60,
        "us_per_launch": 30,
        "fraction_of_busy": 0.8571,
    }
    table = format_kernels({**out, "T": 16, "first_step": 3, "host_us_per_step": 90.0, "device": "cpu"}, top=1)
    assert "from step 3 at T=16 on cpu: per step wall 100.0 us, busy 70.0 us, idle 30.0 us" in table[0]
    assert "aten::mm" in table[2]
    assert table[-1].endswith("(1 more kernels)")


def test_the_bench_writes_the_profile_of_steps_from_the_middle_at_each_T(tmp_path, capsys):
    """debugmodel, n=16, the static step, T = 16, 4 and 1: 8 steps from step 4 at T=16, the 3 after the first at
    T=4 (four tokens a step), none at T=1 (no step before a window); each step with its one Gumbel-max draw
    (its counter noise made inside the step) and one scatter of the drawn tokens into the order table; the
    JSON line keeps the totals and the path."""
    path = tmp_path / "profile.json"
    argv = ["--flavor", "debugmodel", "--n", "16", "--batch", "2", "--repeats", "1", "--graphs", "static"]
    assert bench_command.run(parse([*argv, "--step-profile", str(path), "--json"])) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = json.loads(path.read_text())
    assert (written["graphs"], written["n"], list(written["by_T"])) == ("static", 16, ["16", "4"])
    for t, (steps, first) in {"16": (8, 4), "4": (3, 1)}.items():
        profile = written["by_T"][t]
        assert (profile["T"], profile["steps"], profile["first_step"]) == (int(t), steps, first)
        launches = {k["name"]: k["launches_per_step"] for k in profile["kernels"]}
        assert launches["aten::argmax"] == 1 and launches["aten::scatter_"] == 1
        assert "aten::uniform_" not in launches  # no generator: the noise is a hash of the step's buffers
        assert profile["busy_us_per_step"] > 0
        assert profile["table"][0].startswith(f"cpu operators (self time) of {steps} steps from step {first} at T={t}")
    assert out["step_profile"]["path"] == str(path) and list(out["step_profile"]["by_T"]) == ["16", "4"]
    assert "kernels" not in out["step_profile"]["by_T"]["16"]
    assert f"--step-profile {path}" in out["command"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n", "1", "--step-profile", "p.json"], "--step-profile needs --n >= 2"),
        (["--step-profile", "/no/such/folder/p.json"], "folder /no/such/folder does not exist"),
    ],
)
def test_bad_step_profile_arguments_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message):
        bench_command.check_args(parse(argv))


def test_the_dynamic_sampler_has_no_static_step_to_profile(monkeypatch):
    monkeypatch.setattr(baselines, "build_decoder", lambda *a, **k: pytest.fail("a model was built"))
    args = parse(["--flavor", "debugmodel", "--n", "8", "--device", "cpu", "--step-profile", "p.json"])
    with pytest.raises(UserError, match="--graphs auto runs the dynamic sampler on cpu; allowed with it: on, compile"):
        bench_command.run(args)
