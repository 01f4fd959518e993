"""`aogpt bench sampler` times every variant in interleaved rounds and rejects bad arguments in one line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from aogpt_plugin.bench import baselines
from aogpt_plugin.bench import sampler_speed as bench_command
from aogpt_plugin.bench.sampler_speed import headline_ratios, step_values, summarize
from aogpt_plugin.errors import UserError


def parse(argv):
    parser = argparse.ArgumentParser()
    bench_command.add_to(parser.add_subparsers())
    return parser.parse_args(["sampler", *argv])


def test_step_values():
    assert step_values(256) == [256, 64, 16]
    assert step_values(8) == [8, 2, 1]
    assert step_values(2) == [2, 1]


def test_ratios_are_medians_of_per_round_ratios():
    rounds = [
        {"ao 8": 1.0, "ao 2": 0.25, "ar": 1.0, "encoder 8": 40.0, "encoder 2": 10.0},
        {"ao 8": 2.0, "ao 2": 1.0, "ar": 1.5, "encoder 8": 60.0, "encoder 2": 12.0},  # a slow round
        {"ao 8": 1.1, "ao 2": 0.3, "ar": 1.0, "encoder 8": 44.0, "encoder 2": 11.0},
    ]
    assert headline_ratios(rounds[0], 8) == {
        "ao_vs_encoder_speedup": 40.0,
        "ao_vs_ar_time_ratio": 1.0,
        "ao_quarter_vs_ar_speedup": 4.0,
    }
    out = summarize(rounds, 8)
    assert out["median_seconds"]["ao 8"] == 1.1 and out["median_seconds"]["ar"] == 1.0
    assert out["ratios"]["ao_quarter_vs_ar_speedup"] == pytest.approx(1.0 / 0.3, abs=1e-3)
    assert out["ratio_range"]["ao_quarter_vs_ar_speedup"] == [1.5, 4.0]
    assert out["ratios"]["ao_vs_ar_time_ratio"] == 1.1 and out["ratio_range"]["ao_vs_ar_time_ratio"] == [1.0, 1.333]


def test_json_run_reports_every_variant_and_round(capsys, tmp_path):
    args = parse(["--flavor", "debugmodel", "--n", "8", "--repeats", "2", "--json"])
    assert bench_command.run(args) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(printed)
    assert out["steps"] == [8, 2, 1] and out["n"] == 8 and out["batch"] == 1 and out["device"].startswith("cpu")
    assert out["ao_forward_passes"] == {"8": 8, "2": 2, "1": 1} and out["ar_forward_passes"] == 8
    assert out["encoder_forward_passes"] == {"8": 8, "2": 2, "1": 1}
    assert len(out["rounds"]) == 2 and set(out["rounds"][0]) == {
        "ao 8",
        "ao 2",
        "ao 1",
        "ar",
        "encoder 8",
        "encoder 2",
        "encoder 1",
    }
    for key in ("ao_vs_encoder_speedup", "ao_vs_ar_time_ratio", "ao_quarter_vs_ar_speedup"):
        lo, hi = out["ratio_range"][key]
        assert 0 < lo <= out[key] <= hi
    assert out["command"].startswith("aogpt bench sampler --flavor debugmodel --n 8 --batch 1 --repeats 2")
    assert out["graphs"] == "off" and set(out["ms_per_forward"]) == set(out["rounds"][0])
    assert out["baselines"] == ["ar", "encoder"] and out["decode_attention"] is None
    # the encoder: its first 8 forwards timed, each T's seconds that per forward x T's forwards
    assert out["encoder_timed_forwards"] == 8
    per_forward = out["ms_per_forward"]
    assert per_forward["encoder 8"] == pytest.approx(per_forward["encoder 2"], rel=1e-3)
    assert per_forward["encoder 2"] == pytest.approx(per_forward["encoder 1"], rel=1e-3)
    # the package writes no repository file; the script turns the printed JSON into the docs row
    (tmp_path / "run.json").write_text(printed)
    docs = tmp_path / "bench.md"
    script = [sys.executable, str(ROOT / "scripts" / "update_benchmarks_doc.py"), str(tmp_path / "run.json")]
    proc = subprocess.run([*script, "--docs", str(docs)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out["command"] in docs.read_text()


def test_the_command_names_the_inductor_settings_that_choose_kernels(monkeypatch):
    """A row measured with `TORCHINDUCTOR_MAX_AUTOTUNE=1` says so: its command is not its plain twin's."""
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/elsewhere")  # where kernels are kept, not which: left out
    assert bench_command.command_line(["--n 8"]) == "TORCHINDUCTOR_MAX_AUTOTUNE=1 aogpt bench sampler --n 8"
    monkeypatch.delenv("TORCHINDUCTOR_MAX_AUTOTUNE")
    assert bench_command.command_line(["--n 8"]) == "aogpt bench sampler --n 8"


def test_a_trained_model_times_speculative_sampling_against_t_n_and_ar(capsys, tmp_path):
    from conftest import tiny_model

    from aogpt_plugin.model_dir import save_model

    save_model(tiny_model("adaln", max_seq_len=16, preset="sampler"), str(tmp_path / "model"))
    args = parse(["--model", str(tmp_path / "model"), "--n", "12", "--speculative", "auto", "--repeats", "2", "--json"])
    assert bench_command.run(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["rounds"][0]) == {"ao 12", "ao 3", "ao 1", "spec", "ar"}  # no random-weight encoder
    assert 1 <= out["spec_forward_passes"] <= 12 and out["spec_forwards_per_token"] <= 1
    for key in ("spec_vs_sequential_speedup", "spec_vs_ar_time_ratio"):
        lo, hi = out["ratio_range"][key]
        assert 0 < lo <= out[key] <= hi
    assert "encoder_seconds" not in out and "ao_vs_encoder_speedup" not in out
    assert out["command"].startswith(f"aogpt bench sampler --model {tmp_path / 'model'} --n 12")
    assert "--speculative auto" in out["command"]
    with pytest.raises(UserError, match="--n 17 is outside 1..16"):
        bench_command.check_args(parse(["--model", str(tmp_path / "model"), "--n", "17"]))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--flavor", "huge"], "--flavor 'huge' is unknown"),
        (["--n", "0"], "--n 0 is outside 1..1024"),
        (["--batch", "0"], "--batch 0 must be >= 1"),
        (["--threads", "0"], "--threads 0 must be >= 1"),
        (["--repeats", "0"], "--repeats 0 must be >= 1"),
        (["--speculative", "x"], "--speculative 'x' is not allowed"),
        (["--baselines", "ar,gpt"], "--baselines 'ar,gpt' is not a comma list of ar, encoder, or none"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bench_command.check_args(parse(argv))


def test_graphs_apply_to_every_variant(capsys):
    """With --graphs the AO sampler, the encoder and AR all run static steps (the row says so)."""
    args = parse(["--flavor", "debugmodel", "--n", "8", "--repeats", "1", "--graphs", "static", "--json"])
    assert bench_command.run(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["graphs"] == "static" and "--graphs static" in out["command"]
    assert out["ao_forward_passes"] == {"8": 8, "2": 2, "1": 1} and out["ar_forward_passes"] == 8
    assert out["encoder_forward_passes"] == {"8": 8, "2": 2, "1": 1}


def test_the_timed_rounds_compile_no_step(capsys, monkeypatch):
    """Every step shape is compiled in the warm-up, also one a generation runs once (the first step of
    T=n/4 and T=n/16): a shape's second call compiles (graphs.py), so one
    warm-up run left those compiles, ~15 s each on an H200, inside round 1's seconds. torch.compile is
    made the identity here (the runner still says each compile), so the test costs no inductor time."""
    import torch

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    args = parse(["--flavor", "debugmodel", "--n", "16", "--repeats", "1", "--graphs", "compile", "--backend", "sdpa"])
    assert bench_command.run(args) == 0
    log = capsys.readouterr().err
    compiled = log.count("compiled the")
    assert compiled >= 6  # AO at 3 values of T (4 shapes or more), AR, the encoder's one (its T=n forwards)
    assert "compiled the" not in log[log.index("round 1/1") :]


def test_ao_alone_with_its_decode_attention_named_in_the_row(capsys, tmp_path):
    """`--baselines none` times AO alone (the GEMM-autotune row of the GPU check); the static step's FlexAttention
    setting is in the row and its command, and the docs row renders without AR or the encoder."""
    argv = ["--flavor", "tiny", "--n", "8", "--repeats", "1", "--graphs", "static", "--backend", "flex", "--T", "n"]
    assert bench_command.run(parse([*argv, "--baselines", "none", "--decode-attention", "full", "--json"])) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(printed)
    assert set(out["rounds"][0]) == {"ao 8"} and out["baselines"] == []
    assert "ar_seconds" not in out and "encoder_seconds" not in out and "ao_vs_ar_time_ratio" not in out
    assert out["decode_attention"] == "full"
    assert out["command"].endswith("--decode-attention full --baselines none --T n --json")
    (tmp_path / "run.json").write_text(printed)
    script = [sys.executable, str(ROOT / "scripts" / "update_benchmarks_doc.py"), str(tmp_path / "run.json")]
    proc = subprocess.run([*script, "--docs", str(tmp_path / "b.md")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "| float32, static, full |" in (tmp_path / "b.md").read_text()
    assert bench_command.run(parse([*argv, "--baselines", "ar", "--json"])) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["decode_attention"] == "partial,split=4" and out["baselines"] == ["ar"]  # the default


def test_a_decode_attention_that_cannot_apply_is_refused_before_any_model_is_built(monkeypatch):
    def no_models(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(baselines, "build_decoder", no_models)
    argv = ["--flavor", "debugmodel", "--n", "8", "--device", "cpu"]
    with pytest.raises(UserError, match=r"decode_attention='partial,split=4' sets the static step's FlexAttention"):
        bench_command.run(parse([*argv, "--decode-attention", "partial,split=4"]))  # sdpa, graphs off on a CPU
    with pytest.raises(UserError, match=r"decode_attention='partial,split=99': split=99 is not in 1..64"):
        flex = ["--flavor", "tiny", "--backend", "flex", "--graphs", "static"]  # tiny: heads of 32 (flex on a CPU)
        bench_command.run(parse([*argv, *flex, "--decode-attention", "partial,split=99"]))


def test_what_inductor_cannot_compile_is_refused_before_any_model_is_built(monkeypatch):
    def no_models(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(baselines, "build_decoder", no_models)
    argv = ["--flavor", "debugmodel", "--n", "8", "--graphs", "on", "--device", "cpu"]
    with pytest.raises(UserError, match="linears='onednn' cannot be compiled"):
        bench_command.run(parse([*argv, "--linears", "onednn"]))
    with pytest.raises(UserError, match="backend='flex' cannot be compiled into the step on cpu"):
        bench_command.run(parse([*argv, "--backend", "flex"]))
