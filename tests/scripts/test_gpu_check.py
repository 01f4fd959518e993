"""scripts/gpu_check.sh: each named plan of the next GPU run fits one device call (its steps' timeouts, listed by a
dry run of the GPU mode, add up to at most 540 s of the 600 s a command may run), and runs in CPU mode exactly as
documented (docs/benchmarks.md, "Next GPU run"): every step runs (the gpu tests skip), the benches write their
JSON, the summary says so, and the files are ones the device machine sends back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

SCRIPT = str(ROOT / "scripts" / "gpu_check.sh")
CALL_SECONDS = 540  # of the 600 s a device command may run: the rest for the summary and a margin
KILL_GRACE = 5  # `timeout --kill-after=5`
PLANS = ("A", "B", "C", "C-autotune")
BEST = "partial,split=2,stages=3"  # plan C's setting here (on a GPU: plan A's flex_decode_b32.json "best")


def gpu_check(out, plan: str | None = None, dry: bool = False, **env) -> subprocess.CompletedProcess:
    # the suite's own interpreter: under make test-torch211 the plans run on the GPU image's torch, as they will there
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_DECODE_ATTENTION": BEST, **env}
    env.update({"GPU_CHECK_PLAN": plan} if plan else {}, **({"GPU_CHECK_DRY_RUN": "1"} if dry else {}))
    return subprocess.run(["bash", SCRIPT, str(out)], capture_output=True, text=True, timeout=900, env=env)


def planned_steps(out, plan: str | None = None, **env) -> list[tuple[str, int | None, str]]:
    """The GPU mode's steps of a plan, as its dry run lists them: (name, timeout seconds or None, command)."""
    done = gpu_check(out, plan, dry=True, **env)
    assert done.returncode == 0, done.stderr
    steps = [line.split(" ", 3)[1:] for line in done.stdout.splitlines() if line.startswith("step ")]
    return [(name, None if seconds == "-" else int(seconds), command) for name, seconds, command in steps]


@pytest.mark.parametrize("plan", PLANS)
def test_each_plan_fits_one_device_call(tmp_path, plan):
    """Every step of a plan has its own timeout, and the timeouts (each with its 5 s kill grace, the wheels'
    install counted as on a fresh machine) add up to at most 540 s."""
    steps = planned_steps(tmp_path, plan)
    assert all(seconds is not None for _, seconds, _ in steps), steps
    total = sum(seconds + KILL_GRACE for _, seconds, _ in steps)
    print(f"plan {plan}: {[(name, seconds) for name, seconds, _ in steps]}, {total} s at most")  # shown with -s
    assert total <= CALL_SECONDS, (plan, total)


def test_the_budget_check_can_fail(tmp_path):
    """Every part at once (the default) does not fit one call: the sum above is not vacuous."""
    steps = planned_steps(tmp_path)
    assert sum((seconds or 0) + KILL_GRACE for _, seconds, _ in steps) > CALL_SECONDS


def test_the_plans_run_what_the_next_gpu_run_needs(tmp_path):
    """A: the split-argmax and FlexDecoding CUDA tests, `--graphs compile` at n=1024 batch 32 T=n with its profile,
    the attention bench at batch 32 (timed from CUDA graphs), `compile` at batch 1 over every T with profiles
    (AR, no encoder); B: `small` with `--compile model` at batch 16, its profile and batch 64; C: batch 32 with
    the setting given; C-autotune: AO alone under inductor's GEMM autotuning."""
    plans = {plan: {name: command for name, _, command in planned_steps(tmp_path, plan)} for plan in PLANS}
    a = plans["A"]
    assert list(a) == ["install_wheels", "pytest_decode", "bench_graphs_compile_n1024_b32",
                       "bench_graphs_compile_n1024_b1", "flex_decode_b32"]  # fmt: skip
    assert "-k split_argmax or flex_decoding or decode_attention" in a["pytest_decode"]
    assert (
        "--n 1024 --batch 32 --repeats 2 --graphs compile --T n --baselines ar,encoder --step-profile"
        in a["bench_graphs_compile_n1024_b32"]
    )
    assert (
        "--n 1024 --batch 1 --repeats 2 --graphs compile --T all --baselines ar --step-profile"
        in a["bench_graphs_compile_n1024_b1"]
    )
    assert (
        "bench_flex_decode.py --batch 32 --splits default,4,8,16 --stages default,3 --warps default,4"
        in a["flex_decode_b32"]
    )
    b = plans["B"]
    assert list(b) == ["install_wheels", "bench_train_small", "bench_train_small_b64", "bench_train_profile_small"]
    assert all("--flavor small" in c and "--compile model" in c for name, c in b.items() if name != "install_wheels")
    assert "--batch 16" in b["bench_train_small"] and "--batch 64" in b["bench_train_small_b64"]
    assert "--batch 16 --steps 5" in b["bench_train_profile_small"] and "--profile" in b["bench_train_profile_small"]
    assert f"--graphs compile --T n --decode-attention {BEST} --json" in plans["C"]["bench_graphs_decode_attention"]
    autotune = plans["C-autotune"]["bench_graphs_autotune_gemm"]
    assert "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 " in autotune and "--baselines none" in autotune
    assert "TORCHINDUCTOR_MAX_AUTOTUNE=" not in autotune


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GPU_CHECK_PLAN": "D"}, "error: GPU_CHECK_PLAN=D is not a plan; allowed: A, B, C, C-autotune"),
        ({"GPU_CHECK_PLAN": "A", "GPU_CHECK_PARTS": "tests"}, "GPU_CHECK_PARTS=tests both given; allowed: one"),
        ({"GPU_CHECK_PLAN": "C", "GPU_CHECK_DECODE_ATTENTION": ""}, "plan C needs GPU_CHECK_DECODE_ATTENTION"),
    ],
)
def test_a_bad_plan_is_one_line(tmp_path, env, message):
    done = gpu_check(tmp_path, dry=True, **env)
    assert done.returncode != 0 and message in done.stderr.strip().splitlines()[-1]


def assert_files_come_back(out) -> None:
    """What the device machine sends back from $OUT: at most 8 files, each under 16 MiB, at most 2 folders down,
    named in letters, digits, '.', '_' and '-'."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, sorted(p.name for p in files)
    for path in out.rglob("*"):
        relative = path.relative_to(out)
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in relative.parts), relative
        assert not path.is_file() or (len(relative.parts) <= 3 and path.stat().st_size < 16 << 20), relative


def run_plan(out, plan: str) -> dict:
    done = gpu_check(out, plan)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu" and summary["ok"] is True
    log = (out / "gpu_check.log").read_text()
    assert log.count("exit 0") == len(summary["steps"]) and "timeout --kill-after=5" in log
    assert_files_come_back(out)
    return summary


CPU_STEPS = {
    "A": ["pytest_decode", "bench_graphs_static_n16_b2", "bench_graphs_static_n16_b1", "flex_decode_b32"],
    "B": ["bench_train_debugmodel", "bench_train_debugmodel_b4", "bench_train_profile_debugmodel"],
    "C": ["bench_graphs_decode_attention"],
    "C-autotune": ["bench_graphs_autotune_gemm"],
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the full GPU benches")
@pytest.mark.parametrize("plan", PLANS)
def test_each_plan_runs_in_cpu_mode(tmp_path, plan):
    summary = run_plan(tmp_path, plan)
    assert [s["step"] for s in summary["steps"]] == CPU_STEPS[plan]
    benches = summary["benches"]
    if plan == "A":
        assert summary["pytest_decode"]["skipped"] == summary["pytest_decode"]["tests"] > 0  # CUDA tests skip here
        b2, b1 = benches["bench_graphs_static_n16_b2"], benches["bench_graphs_static_n16_b1"]
        assert b2["steps"] == [16] and b2["baselines"] == ["ar", "encoder"] and b2["encoder_timed_forwards"] == 16
        assert b1["steps"] == [16, 4, 1] and b1["baselines"] == ["ar"] and "encoder_seconds" not in b1
        profiles = summary["step_profiles"]
        assert set(profiles) == {"step_profile_static_n16_b2", "step_profile_static_n16_b1"}
        assert set(profiles["step_profile_static_n16_b1"]) == {"16", "4"}  # T=1 has no step before a window
        flex = summary["flex_decode"]["flex_decode_b32"]
        assert flex["timer"] == "host" and flex["best"] in {v["decode_attention"] for v in flex["variants"]}
        assert [v["layout"] for v in flex["variants"]] == ["full"] * 4 + ["partial"] * 4
    elif plan == "B":
        assert [benches[f"bench_train_debugmodel{b}"]["batch"] for b in ("", "_b4")] == [2, 4]
        profile = benches["bench_train_profile_debugmodel"]["profile"]
        assert set(profile) == {"ar", "ao"} and profile["ao"]["categories"]["loss"]["ms_per_step"] > 0
        assert summary["graph_break_log_lines"] == 0
    elif plan == "C":
        row = benches["bench_graphs_decode_attention_n16_b2"]
        assert row["decode_attention"] == BEST and f"--decode-attention {BEST}" in row["command"]
        assert row["backend"] == "flex" and "ao_vs_encoder_speedup" in row
    else:
        row = benches["bench_graphs_compile_autotune_gemm_n16_b2"]
        assert row["command"].startswith("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 aogpt bench sampler")
        assert row["baselines"] == [] and set(row["rounds"][0]) == {"ao 16"}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the full GPU benches")
def test_cpu_mode_runs_every_part_and_writes_a_summary(tmp_path):
    """Every part at once (more than the plans: the CUDA suites, the first steps, the `on` rows and requests)."""
    done = gpu_check(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "cpu" and summary["ok"] is True
    training = {"bench_train_debugmodel", "bench_train_debugmodel_b4", "bench_train_profile_debugmodel"}
    steps = {"pytest_gpu", "bench_sampler_cpu", "bench_graphs_cpu", "bench_requests", "first_steps_aogpt_debug"}
    steps |= {"flex_decode_b32", "flex_decode_b1", "bench_graphs_static_n16_b2", "bench_graphs_autotune_gemm"}
    assert {s["step"] for s in summary["steps"]} >= training | steps
    assert summary["pytest_gpu"]["skipped"] == summary["pytest_gpu"]["tests"] > 0  # every CUDA test skips here
    assert summary["benches"]["bench_train_debugmodel"]["mfu"] is None
    assert [(row["step"], row["loss"] > 10) for row in summary["first_steps_debug"]] == [(1, True), (2, True)]
    assert (tmp_path / "first_steps_aogpt_debug" / "tb").is_dir()  # the run's dump folder: in OUT, not left in /tmp
    assert summary["benches"]["bench_sampler_b1"]["n"] == 16
    assert summary["benches"]["bench_graphs_static_cpu"]["graphs"] == "static"
    requests = summary["benches"]["bench_requests"]  # mixed requests at batch 1 and 4: the same tokens
    assert requests["requests"] == 12 and requests["same_tokens_at_every_batch_size"] is True
    profiled = summary["step_profiles"]["step_profile_cpu"]  # the static step's kernels (--step-profile), by T
    assert set(profiled) == {"16", "4"}  # T=1 has no step before a profile window
    assert all(p["launches_per_step"] > 0 and p["busy_us_per_step"] > 0 for p in profiled.values())


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the full GPU benches")
def test_gpu_check_parts_select_the_training_steps(tmp_path):
    """`GPU_CHECK_PARTS=train_profile` runs the profile alone of the training part; a part that was not asked
    for leaves no step."""
    done = gpu_check(tmp_path, GPU_CHECK_PARTS="train_profile")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["bench_train_profile_debugmodel"]
    assert "pytest_gpu" not in summary and summary["first_steps_debug"] == []
