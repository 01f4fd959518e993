"""End-to-end training through torchtitan's Trainer on CPU: loss falls, TensorBoard, exact resume,
conversion round trip, config errors before any process group, NaN guard."""

from __future__ import annotations

import glob
import shutil

import pytest
import torch
from conftest import ROOT, debug_train_args, run_torchrun

HELPER = str(ROOT / "tests" / "helpers" / "train_and_dump.py")


def _train(tmp_path, name, steps, nproc=1, extra=None, helper_args=(), dump=None):
    out = tmp_path / f"{name}.pt"
    dump = dump or tmp_path / "run"
    args = [HELPER, str(out), *helper_args, "--", *debug_train_args(dump, steps, **(extra or {}))]
    proc = run_torchrun(args, nproc=nproc, module=False)
    return proc, out, dump


def _check_resume_and_convert(tmp_path, nproc, extra=None):
    steps = 8
    proc, out_full, dump = _train(tmp_path, "full", steps, nproc, extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    full = torch.load(out_full)
    losses = [full["losses"][s] for s in range(1, steps + 1)]
    assert losses[-1] < losses[0] - 0.05, losses  # it learns
    # kill-after-step-4 equivalent: drop the newest checkpoint and run again -> resumes from step 4
    shutil.rmtree(dump / "checkpoint" / f"step-{steps}")
    proc, out_res, _ = _train(tmp_path, "resumed", steps, nproc, extra, dump=dump)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Training starts at step 5" in proc.stdout + proc.stderr
    resumed = torch.load(out_res)
    for s in range(5, steps + 1):
        assert resumed["losses"][s] == full["losses"][s], (s, resumed["losses"][s], full["losses"][s])
    assert resumed["val"][steps] == full["val"][steps]  # includes EMA validation: EMA state resumed
    torch.testing.assert_close(resumed["logits_raw"], full["logits_raw"], rtol=0, atol=0)
    torch.testing.assert_close(resumed["logits_ema"], full["logits_ema"], rtol=0, atol=0)
    return full, dump


def _check_conversion(tmp_path, full, dump):
    from aogpt_plugin.convert import convert
    from aogpt_plugin.model_dir import load_model_dir

    for weights, key in (("raw", "logits_raw"), ("ema", "logits_ema")):
        out_dir = tmp_path / f"model_{weights}"
        cfg = convert(str(dump / "checkpoint"), str(out_dir), weights=weights)
        assert cfg.weights == weights and cfg.step == 8
        model = load_model_dir(str(out_dir)).model
        with torch.no_grad():
            logits = model(full["tokens"], order=full["order"])
        torch.testing.assert_close(logits, full[key], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(full["logits_raw"], full["logits_ema"])  # the choice matters


def test_train_resume_convert_single_process(tmp_path):
    full, dump = _check_resume_and_convert(tmp_path, nproc=1)
    # validation reports L2R and AO loss, raw and EMA
    assert set(full["val"][8]) >= {
        "validation_metrics/loss_l2r",
        "validation_metrics/loss_ao",
        "validation_metrics/loss_l2r_ema",
        "validation_metrics/loss_ao_ema",
    }
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = sorted(glob.glob(str(dump / "tb" / "*")))[0]  # the first run; the resumed one may add a folder
    acc = EventAccumulator(tb_dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss_metrics/global_avg_loss", "validation_metrics/loss_l2r_ema", "validation_metrics/loss_ao"} <= tags
    _check_conversion(tmp_path, full, dump)


@pytest.mark.slow
def test_train_resume_convert_two_processes_fsdp(tmp_path):
    full, dump = _check_resume_and_convert(tmp_path, nproc=2)
    _check_conversion(tmp_path, full, dump)


@pytest.mark.slow
def test_train_two_processes_compile_and_selective_ac(tmp_path):
    extra = {"compile.enable": True, "activation_checkpoint.mode": "selective"}
    proc, out, _ = _train(tmp_path, "compiled", 6, nproc=2, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = torch.load(out)["losses"]
    assert losses[6] < losses[1]


@pytest.mark.slow
def test_nan_loss_stops_before_weights_change(tmp_path):
    proc, out, dump = _train(tmp_path, "nan", 8, helper_args=("--nan-at-step", "6"), extra={"checkpoint.interval": 4})
    assert proc.returncode != 0
    assert "non-finite training loss" in proc.stdout + proc.stderr
    steps = sorted(p.name for p in (dump / "checkpoint").iterdir())
    assert steps == ["step-4"], steps  # the last good checkpoint is the newest; nothing after the NaN
    from aogpt_plugin.convert import convert
    from aogpt_plugin.model_dir import load_model_dir

    convert(str(dump / "checkpoint"), str(tmp_path / "m"), weights="raw")
    model = load_model_dir(str(tmp_path / "m")).model
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _launch(args: list[str], env=None, timeout=300):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.train", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_config_fails_in_one_line_before_process_group(tmp_path):
    """The launcher path; every key's message is checked in-process in test_preflight.py."""
    args = ["--job.config_file", "train_configs/aogpt_debug.toml", "--job.dump_folder", str(tmp_path / "run")]
    needle = "aogpt.p_l2r=1.5"
    proc = _launch(args + ["--aogpt.p_l2r", "1.5"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "Traceback"))] == [
        proc.stderr.strip().splitlines()[-1]
    ]
    assert needle in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing written, no trainer built


def test_bad_config_under_torchrun_stops_every_rank_before_the_mesh(tmp_path):
    args = ["aogpt_plugin.train", "--job.config_file", "train_configs/aogpt_debug.toml"]
    args += ["--job.dump_folder", str(tmp_path / "run"), "--aogpt.p_l2r", "-0.5"]
    proc = run_torchrun(args, nproc=2, timeout=180)
    assert proc.returncode != 0
    assert proc.stderr.count("error: aogpt.p_l2r=-0.5 is outside the allowed range [0, 1]") == 2
    assert "device mesh" not in (proc.stdout + proc.stderr).lower()


def test_bad_tokenizer_cache_fails_in_one_line(tmp_path):
    proxy = "http://127.0.0.1:9"  # no network: tiktoken cannot fetch what the empty cache lacks
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"), "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy}
    proc = _launch(["--job.config_file", "train_configs/aogpt_debug.toml"], env=env)
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert "aogpt.tokenizer='gpt2' cannot load" in line
