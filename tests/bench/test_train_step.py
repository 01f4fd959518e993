"""`aogpt bench train` measures both variants in one run and rejects bad arguments in one line."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from aogpt_plugin.bench import train_step as train_bench
from aogpt_plugin.errors import UserError


def parse(argv):
    parser = argparse.ArgumentParser()
    train_bench.add_to(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_reports_rounds_and_the_median_of_per_round_ratios_with_their_range(capsys):
    args = parse(["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "2", "--rounds", "3"])
    args.json = True
    assert train_bench.run(args) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert set(out["median_step_ms"]) == {"ar", "ao"} and min(out["median_step_ms"].values()) > 0
    per_round = sorted(r["ao"] / r["ar"] for r in out["rounds"])
    assert len(per_round) == 3 and out["ao_vs_ar_step_time_ratio"] == pytest.approx(per_round[1], rel=1e-3)
    assert out["ratio_range"] == pytest.approx([per_round[0], per_round[2]], rel=1e-3)
    assert sorted(out["round_ratios"]) == pytest.approx(per_round, rel=1e-3)
    ms = out["median_step_ms"]
    assert out["ratio_of_median_step_ms"] == pytest.approx(ms["ao"] / ms["ar"], rel=1e-3)
    assert out["seq_len"] == 16 and out["device"].startswith("cpu (")
    assert out["command"].startswith(
        "aogpt bench train --flavor debugmodel --seq-len 16 --batch 2 --steps 2 --rounds 3"
    )
    assert out["peak_memory_gib"] is None and out["loss_chunk_rows"] == 1024  # no device memory on a CPU
    assert "round 3/3" in captured.err  # progress while it runs
    assert out["mfu"] is None and out["peak_tflops"] is None  # no MFU on a CPU
    assert out["tflops"]["ao"] > 0


def test_the_printed_headline_says_what_it_is_next_to_the_figures_it_summarises(capsys):
    """The AO / AR headline (median of per-round ratios) once sat under two step-time medians whose
    ratio it did not match, unexplained: now every per-round ratio and the ratio of the medians show."""
    args = parse(["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "1", "--rounds", "3"])
    assert train_bench.run(args) == 0
    out = capsys.readouterr().out
    step_ms = {v: float(m) for v, m in re.findall(r"^  (ar|ao) +([\d.]+) ms/step \(median of 3 steps\)", out, re.M)}
    headline = re.search(
        r"AO / AR step time \(logits loss path\), median of 3 per-round ratios: ([\d.]+) \[min ([\d.]+), max ([\d.]+)\]",
        out,
    )
    rounds = re.search(r"per-round ratios: ([\d., ]+); ratio of the overall medians above: ([\d.]+)", out)
    assert set(step_ms) == {"ar", "ao"} and headline and rounds, out
    per_round = sorted(float(x) for x in rounds.group(1).split(", "))
    assert [float(x) for x in headline.groups()] == [per_round[1], per_round[0], per_round[2]]
    assert float(rounds.group(2)) == pytest.approx(step_ms["ao"] / step_ms["ar"], abs=2e-3)


def test_each_loss_path_is_timed_in_the_same_rounds_with_flops_as_executed_and_ar_equivalent(capsys):
    """`--loss-path logits,fused`: every variant on both paths, interleaved; AO / AR per path and fused / logits
    per variant. TFLOP/s count what a variant executes (AO's adaLN once per position of the micro-batch's
    tables), the AR-equivalent ones AR's FLOPs for the same tokens."""
    argv = ["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "1", "--rounds", "2"]
    assert train_bench.run(parse([*argv, "--loss-path", "logits,fused", "--json"])) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["median_step_ms"]) == {"ar", "ao", "ar+fused", "ao+fused"} and out["loss_paths"] == [
        "logits",
        "fused",
    ]
    assert set(out["by_loss_path"]) == {"logits", "fused"} and set(out["fused_vs_logits"]) == {"ar", "ao"}
    assert out["ao_vs_ar_step_time_ratio"] == out["by_loss_path"]["logits"]["ao_vs_ar_step_time_ratio"]
    assert out["command"].endswith("--variants ar,ao --loss-path logits,fused")
    flops = out["flops_per_token"]
    assert flops["ao"] == flops["ao+fused"] > flops["ar"] == flops["ar+fused"]
    ar_per_token = train_bench.ar_flops_per_token("debugmodel", 16)
    assert flops["ar"] == ar_per_token
    for v, tps in out["tokens_per_s"].items():
        assert out["tflops_ar_equivalent"][v] == pytest.approx(tps * ar_per_token / 1e12, abs=1e-3)


def test_profile_summarises_each_variant_by_category_and_writes_traces(capsys, tmp_path):
    argv = ["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "2", "--warmup", "1"]
    args = parse([*argv, "--profile", "--profile-trace", str(tmp_path), "--loss-chunk-rows", "8", "--json"])
    assert train_bench.run(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["command"].endswith("--loss-chunk-rows 8 --profile") and out["loss_chunk_rows"] == 8
    assert set(out["profile"]) == {"ar", "ao"}
    for summary in out["profile"].values():
        assert summary["steps"] == 2 and summary["categories"]["loss"]["ms_per_step"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train_debugmodel_ao.json", "train_debugmodel_ar.json"]
    assert train_bench.run(parse([*argv, "--variants", "ao", "--profile"])) == 0
    printed = capsys.readouterr().out
    assert "category" in printed and "idle" in printed and "step (wall)" in printed


def test_compile_takes_blocks_by_default_or_the_whole_model():
    assert parse([]).compile is None
    assert parse(["--compile"]).compile == "blocks" and parse(["--compile", "--json"]).json
    assert parse(["--compile", "model"]).compile == "model"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--flavor", "huge"], "--flavor 'huge' is unknown"),
        (["--seq-len", "9999"], "--seq-len 9999 is outside 2..256"),
        (["--variants", "ar,xl"], "--variants 'ar,xl' is not a comma list"),
        (["--loss-path", "logits,lazy"], "--loss-path 'logits,lazy' is not a comma list of logits, fused"),
        (["--batch", "0"], "--batch 0 must be >= 1"),
        (["--loss-chunk-rows", "-1"], "--loss-chunk-rows -1 must be >= 0"),
        (["--profile-trace", "/tmp/x"], "--profile-trace needs --profile"),
        (["--profile", "--compile", "--warmup", "0"], "--profile with --compile needs --warmup >= 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train_bench.check_args(parse(argv))


def test_a_variants_resident_bytes_are_its_weights_optimizer_state_and_batch():
    """What the peak-memory figure leaves out of a variant's cell: the other variants' holdings."""
    import torch

    variant = train_bench.Variant("debugmodel", "adaln", "random", 16, 2, torch.device("cpu"), torch.float32, None)
    weights = sum(p.numel() * 4 for p in variant.model.parameters())
    batch = 2 * variant.tokens.numel() * 8  # tokens and the order, int64
    assert variant.resident_bytes() == weights + batch  # AdamW keeps no state before its first step
    variant.step()
    assert variant.resident_bytes() == 3 * weights + batch + 4 * len(
        variant.opt.state
    )  # + exp_avg(_sq), step (float32)
