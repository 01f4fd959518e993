"""End-to-end training through torchtitan's Trainer on CPU: loss falls, TensorBoard, exact resume,
conversion round trip, config errors before any process group, the step guard, the dump-folder
lock, resuming with a new learning rate or a different number of processes."""

from __future__ import annotations

import glob
import shutil

import pytest
import torch
from conftest import ROOT, debug_train_args, error_lines, launch_train, recorded_losses, run_torchrun

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
        "validation_metrics/context_gain",
        "validation_metrics/context_gain_ema",
    }
    assert abs(full["val"][8]["validation_metrics/context_gain"]) < 5  # finite, in nats
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
def test_the_fused_loss_path_trains_two_fsdp_processes_as_the_logits_path(tmp_path):
    """`[aogpt] loss_path = "fused"` under FSDP, which then keeps the head in the root's unit: the logits path's
    losses and trained weights (its logits), to float32 rounding."""
    runs = {}
    for path in ("logits", "fused"):
        extra = {"aogpt.loss_path": path, "checkpoint.enable": False}
        proc, out, _ = _train(tmp_path, path, 4, nproc=2, extra=extra, dump=tmp_path / path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[path] = torch.load(out)
    losses = {path: [run["losses"][s] for s in range(1, 5)] for path, run in runs.items()}
    assert losses["fused"] == pytest.approx(losses["logits"], abs=1e-4)
    torch.testing.assert_close(runs["fused"]["logits_raw"], runs["logits"]["logits_raw"], rtol=1e-4, atol=1e-4)


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
    assert "step 6: the training loss is NaN/inf; stopped before the optimizer step" in proc.stdout + proc.stderr
    steps = sorted(p.name for p in (dump / "checkpoint").iterdir())
    assert steps == ["step-4"], steps  # the last good checkpoint is the newest; nothing after the NaN
    from aogpt_plugin.convert import convert
    from aogpt_plugin.model_dir import load_model_dir

    convert(str(dump / "checkpoint"), str(tmp_path / "m"), weights="raw")
    model = load_model_dir(str(tmp_path / "m")).model
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_bad_config_fails_in_one_line_before_process_group(tmp_path):
    """The launcher path; every key's message is checked in-process in test_preflight.py."""
    args = ["--job.config_file", "train_configs/aogpt_debug.toml", "--job.dump_folder", str(tmp_path / "run")]
    needle = "aogpt.p_l2r=1.5"
    proc = launch_train(args + ["--aogpt.p_l2r", "1.5"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "Traceback"))] == [
        proc.stderr.strip().splitlines()[-1]
    ]
    assert needle in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing written, no trainer built


@pytest.mark.slow
def test_bad_config_under_torchrun_stops_every_rank_before_the_mesh(tmp_path):
    args = ["aogpt_plugin.train", "--job.config_file", "train_configs/aogpt_debug.toml"]
    args += ["--job.dump_folder", str(tmp_path / "run"), "--aogpt.p_l2r", "-0.5"]
    proc = run_torchrun(args, nproc=2, timeout=180)
    assert proc.returncode != 0
    assert proc.stderr.count("error: aogpt.p_l2r=-0.5 is outside the allowed range [0, 1]") == 1  # rank 0 speaks
    assert "device mesh" not in (proc.stdout + proc.stderr).lower()


def test_bad_tokenizer_cache_fails_in_one_line(tmp_path):
    proxy = "http://127.0.0.1:9"  # no network: tiktoken cannot fetch what the empty cache lacks
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"), "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy}
    proc = launch_train(["--job.config_file", "train_configs/aogpt_debug.toml"], env=env)
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert "aogpt.tokenizer='gpt2' cannot load" in line


def _checkpoint_tensors(step_dir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    md = FileSystemReader(str(step_dir)).read_metadata()
    state = {
        k: torch.empty(v.size, dtype=v.properties.dtype)
        for k, v in md.state_dict_metadata.items()
        if isinstance(v, TensorStorageMetadata) and k.split(".")[0] in ("layers", "ema", "output", "tok_embeddings")
    }
    dcp.load(state, checkpoint_id=str(step_dir), no_dist=True)
    return state


def _complete_steps(dump) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in (dump / "checkpoint").glob("step-*/.metadata"))


def test_diverging_run_stops_in_one_line_and_its_advice_gets_past_the_step_that_failed(tmp_path):
    """Reported faults: lr 1e4 made the step-3 checkpoint 100% NaN, called "the last good one"; then the
    advice named step-2, finite but exploded (validation loss 2.6e11), and its command failed at step 3."""
    import json
    import os
    import re
    import subprocess
    import sys

    dump = tmp_path / "run"
    args = debug_train_args(dump, 10, **{"optimizer.lr": 1e4, "checkpoint.interval": 1, "validation.freq": 100})
    proc = launch_train(args)
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert (
        "NaN/inf" in line and "stopped before the optimizer step, so no weight, EMA or checkpoint was written" in line
    )
    failed = int(re.match(r"error: step (\d+): ", line).group(1))
    steps = _complete_steps(dump)
    assert steps[-1] == failed - 1  # it stopped right after the last save
    for step in steps:
        for name, t in _checkpoint_tensors(dump / "checkpoint" / f"step-{step}").items():
            assert torch.isfinite(t).all(), (step, name)
    # the advice names only a checkpoint whose weights then gave a loss in the normal range
    history = {}
    for step in steps:
        record = json.loads((dump / "checkpoint" / f"step-{step}" / "aogpt.json").read_text())
        history |= {int(k): v for k, v in record["losses"].items()}
    named = re.search(r"checkpoint/step-(\d+) ", line)
    if named:
        assert history[int(named.group(1)) + 1][1], (line, history)
    else:
        assert "fresh folder" in line and not any(history.get(s + 1, [0, False])[1] for s in steps), history
    # and its command, run verbatim, gets past the step that failed
    command = "python -m aogpt_plugin.train " + line.split(" aogpt_plugin.train ", 1)[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    again = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    stopped = re.search(r"error: step (\d+): ", again.stderr)
    assert again.returncode == 0 or (stopped and int(stopped.group(1)) > failed), again.stderr[-2000:]


@pytest.mark.slow
def test_diverging_fsdp_run_stops_every_rank_in_one_line_and_never_saves_nonfinite_weights(tmp_path):
    """The reported 2-process fault (lr 1e6 -> a step-2 checkpoint all NaN), under torchrun: one line
    from rank 0, and torchrun's failure summary carries no per-rank traceback of the stop."""
    dump = tmp_path / "run"
    args = debug_train_args(dump, 10, **{"optimizer.lr": 1e6, "checkpoint.interval": 1, "validation.freq": 100})
    proc = run_torchrun(["aogpt_plugin.train", *args], nproc=2)
    assert proc.returncode != 0
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "NaN/inf" in line and "--nproc_per_node=2" in line
    assert "NonFiniteStepError" not in proc.stderr and "aogpt_plugin/training/step_guard.py" not in proc.stderr, (
        proc.stderr[-3000:]
    )
    steps = sorted(int(p.name.split("-")[1]) for p in (dump / "checkpoint").iterdir())
    assert line.startswith(f"error: step {steps[-1] + 1}: ")
    for step in steps:
        for name, t in _checkpoint_tensors(dump / "checkpoint" / f"step-{step}").items():
            assert torch.isfinite(t).all(), (step, name)


def _tb_scalars(dump, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for events in sorted(glob.glob(str(dump / "tb" / "*"))):
        acc = EventAccumulator(events)
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            out.update({e.step: e.value for e in acc.Scalars(tag)})
    return out


@pytest.mark.slow
def test_resume_with_a_new_learning_rate_applies_it_at_the_resumed_step(tmp_path):
    """`--checkpoint.load_step N --optimizer.lr X` (what the step guard advises) uses X: torchtitan alone
    restores the checkpoint's learning rate and silently ignores the new one."""
    first, second = tmp_path / "first", tmp_path / "second"
    base = {"checkpoint.interval": 2, "validation.freq": 100, "lr_scheduler.warmup_steps": 2}
    proc = launch_train(debug_train_args(first, 4, **{**base, "optimizer.lr": 1e-3}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(first / "checkpoint" / "step-2", second / "checkpoint" / "step-2")
    proc = launch_train(debug_train_args(second, 4, **{**base, "optimizer.lr": 4e-3, "checkpoint.load_step": 2}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming with optimizer.lr=0.004 (the checkpoint was trained with 0.001)" in proc.stderr + proc.stdout
    old, new = _tb_scalars(first, "lr"), _tb_scalars(second, "lr")
    assert set(new) == {3, 4}
    for step in (3, 4):
        assert new[step] == pytest.approx(4 * old[step], rel=1e-6)


def test_second_run_into_a_busy_dump_folder_is_refused_in_one_line(tmp_path):
    from aogpt_plugin.training.launcher import hold_dump_folder

    dump = tmp_path / "run"
    lock = hold_dump_folder(str(dump))  # a training run holding the folder (this process)
    try:
        proc = launch_train(debug_train_args(dump, 2))
    finally:
        lock.close()
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert f"--job.dump_folder '{dump}' is in use by another training run (pid " in line
    assert not (dump / "checkpoint").exists() and not (dump / "tb").exists()  # nothing of the first run touched


@pytest.mark.slow
def test_resume_with_another_number_of_processes_is_one_line_before_the_mesh(tmp_path):
    dump = tmp_path / "run"
    proc = launch_train(debug_train_args(dump, 2, **{"checkpoint.interval": 2, "validation.freq": 100}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = ["aogpt_plugin.train", *debug_train_args(dump, 4, **{"checkpoint.interval": 2})]
    proc = run_torchrun(args, nproc=2, timeout=180)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert lines == [
        f"error: '{dump}/checkpoint/step-2' was saved by 1 data-parallel ranks and this run has 2: it can only "
        "be resumed with 1 processes; use a fresh --job.dump_folder to start a new run"
    ]
    assert "Missing key" not in proc.stderr


@pytest.mark.slow
def test_a_checkpoint_with_nan_weights_is_refused_by_name(tmp_path):
    import torch.distributed.checkpoint as dcp

    dump = tmp_path / "run"
    proc = launch_train(debug_train_args(dump, 2, **{"checkpoint.interval": 2, "validation.freq": 100}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    step_dir = dump / "checkpoint" / "step-2"
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    state = _load_state_dict_from_keys(checkpoint_id=str(step_dir))  # everything, dataloader state included
    state["ema.layers.1.feed_forward.w2.weight"][0, 0] = float("nan")
    shutil.rmtree(step_dir)
    dcp.save(state, checkpoint_id=str(step_dir), no_dist=True)
    proc = launch_train(debug_train_args(dump, 4, **{"checkpoint.interval": 2, "validation.freq": 100}))
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "holds NaN/inf values in tensor 'ema.layers.1.feed_forward.w2.weight'" in line


@pytest.mark.slow
def test_the_debug_recipe_is_seeded_so_identical_runs_give_identical_losses(tmp_path):
    def losses(dump):
        args = debug_train_args(dump, 3, **{"validation.freq": 100, "checkpoint.interval": 100, "debug.seed": None})
        proc = launch_train(args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return _tb_scalars(dump, "loss_metrics/global_avg_loss")

    assert losses(tmp_path / "a") == losses(tmp_path / "b")


@pytest.mark.slow
def test_a_tokenizer_json_trains_converts_samples_and_evaluates(tmp_path):
    """Round trip with a small byte-level BPE: the model's vocabulary follows the tokenizer, the model
    folder carries a copy of it, and `eval ppl` reports bits per byte."""
    import json

    from conftest import HELDOUT

    from aogpt_plugin.cli import main
    from aogpt_plugin.data.tokenizer_training import train_tokenizer

    tok = tmp_path / "tok.json"
    train_tokenizer(str(HELDOUT), 320, str(tok), max_bytes=200_000)
    dump = tmp_path / "run"
    proc = launch_train(debug_train_args(dump, 4, **{"aogpt.tokenizer": str(tok), "validation.freq": 4}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    model_dir = tmp_path / "model"
    assert main(["convert", str(dump / "checkpoint"), str(model_dir), "--tokenizer", str(tok)]) == 0
    config = json.loads((model_dir / "config.json").read_text())
    assert config["tokenizer"] == "tokenizer.json" and config["model_args"]["vocab_size"] == 320
    assert (model_dir / "tokenizer.json").read_bytes() == tok.read_bytes()
    tok.unlink()  # the folder is self-contained
    assert main(["sample", "--model", str(model_dir), "--length", "16", "--steps", "4", "--no-progress"]) == 0
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"Paragraph {i} about the history of the city." for i in range(40)))
    assert (
        main(["eval", "ppl", "--model", str(model_dir), "--dataset", str(text), "--order", "l2r", "--seq-len", "32"])
        == 0
    )


@pytest.mark.slow
def test_a_synthetic_source_trains_without_text(tmp_path):
    spec = "markov:vocab=32,order=2,branching=4,seed=0"
    extra = {
        "training.dataset": "synthetic",
        "training.dataset_path": spec,
        "validation.dataset": "synthetic",
        "validation.dataset_path": spec,
        "aogpt.tokenizer": "symbols:32",
        "validation.freq": 4,
    }
    proc = launch_train(debug_train_args(tmp_path / "run", 4, **extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "aogpt validation step 4" in proc.stdout + proc.stderr
    bad = launch_train(debug_train_args(tmp_path / "bad", 4, **{**extra, "aogpt.tokenizer": "symbols:16"}))
    assert bad.returncode == 2
    assert "draws 32 symbols but aogpt.tokenizer='symbols:16' has 16; allowed: symbols:32" in bad.stderr


def _scalars(dump, tag: str) -> dict[int, float]:
    """{step: value} of a TensorBoard scalar over every run folder under dump/tb."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = {}
    for folder in sorted(glob.glob(str(dump / "tb" / "*"))):
        acc = EventAccumulator(folder)
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            values |= {e.step: e.value for e in acc.Scalars(tag)}
    return values


@pytest.mark.slow
def test_the_curriculum_is_logged_and_resumes_bitwise(tmp_path):
    """`[aogpt] l2r_curriculum_steps`: TensorBoard's aogpt/l2r_share is the curriculum's share at every step, and
    a run resumed mid-curriculum prints the losses of the uninterrupted one."""
    from aogpt_plugin.orders import L2RCurriculum

    extra = {"aogpt.l2r_curriculum_steps": 4, "aogpt.l2r_curriculum": "cosine", "checkpoint.interval": 3}
    dump = tmp_path / "run"
    full = launch_train(debug_train_args(dump, 6, **extra))
    assert full.returncode == 0, full.stderr[-3000:]
    curriculum = L2RCurriculum(4, "cosine")
    shares = _scalars(dump, "aogpt/l2r_share")
    assert shares == pytest.approx({s: curriculum.share(s, 0.1) for s in range(1, 7)}, abs=1e-7)
    assert shares[1] == 1.0 and shares[5] == pytest.approx(0.1)
    first = recorded_losses(dump)
    shutil.rmtree(dump / "checkpoint" / "step-6")
    resumed = launch_train(debug_train_args(dump, 6, **extra))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Training starts at step 4" in resumed.stdout + resumed.stderr
    again = recorded_losses(dump)
    assert [again[s] for s in (4, 5, 6)] == [first[s] for s in (4, 5, 6)]
