"""The benchmark's rows in docs/benchmarks.md: only the marked section changes (the bench itself is no test)."""

from __future__ import annotations

import datetime
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from update_benchmarks_doc import END, START, update_text  # noqa: E402

RESULT = {
    "command": "aogpt bench sampler --flavor tiny --n 64 --batch 1",
    "device": "cpu (test, 1 threads)",
    "flavor": "tiny",
    "n": 64,
    "batch": 1,
    "dtype": "float32",
    "steps": [64, 16, 4],
    "ao_seconds": {"64": 1.0, "16": 0.3, "4": 0.1},
    "encoder_seconds": {"64": 30.0, "16": 8.0, "4": 2.0},
    "ao_forward_passes": {"64": 64, "16": 16, "4": 4},
    "encoder_forward_passes": {"64": 64, "16": 16, "4": 4},
    "ar_seconds": 0.95,
    "ar_forward_passes": 64,
    "ao_vs_encoder_speedup": 30.0,
    "ao_vs_ar_time_ratio": 1.053,
    "ao_quarter_vs_ar_speedup": 3.167,
}


def test_section_created_then_rows_replaced_or_appended():
    before, after = "# Benchmarks\n\nSome text.\n", "\n## Later\nkept\n"
    text = update_text(before, RESULT)
    assert text.startswith(before) and START in text and END in text and "| 30.00x |" in text
    text = text + after
    again = update_text(text, {**RESULT, "ao_vs_encoder_speedup": 31.0})  # same command + device: replaced
    assert again.count("--flavor tiny --n 64") == 1 and "| 31.00x |" in again
    other = update_text(again, {**RESULT, "device": "NVIDIA H100"})  # another device: appended
    assert other.count("--flavor tiny --n 64") == 2
    assert other.startswith(before) and other.endswith(after)
    today = datetime.date.today().isoformat()
    earlier = other.replace(f"| {today} |", "| 2026-01-02 |")  # the same run, measured on another day: kept
    assert update_text(earlier, RESULT).count("--flavor tiny --n 64") == 3


def test_ratio_cells_show_the_range_of_several_rounds():
    single = update_text("", RESULT)
    assert "| 30.00x | 1.053 | 3.17x |" in single  # one round: no range
    ranges = {
        "ao_vs_encoder_speedup": [29.5, 31.0],
        "ao_vs_ar_time_ratio": [1.01, 1.1],
        "ao_quarter_vs_ar_speedup": [3.05, 3.3],
    }
    text = update_text("", {**RESULT, "repeats": 3, "ratio_range": ranges})
    assert "| 30.00x [29.50x, 31.00x] | 1.053 [1.010, 1.100] | 3.17x [3.05x, 3.30x] |" in text


def test_a_speculative_run_goes_to_its_own_table_and_leaves_the_sampler_table_alone():
    from update_benchmarks_doc import SPEC_END, SPEC_START

    spec = {
        "command": "aogpt bench sampler --model m --n 16 --batch 1 --repeats 3 --speculative auto",
        "device": "cpu (test, 1 threads)",
        "n": 16,
        "batch": 1,
        "repeats": 3,
        "ao_seconds": {"16": 0.2, "4": 0.06, "1": 0.02},
        "ao_forward_passes": {"16": 16, "4": 4, "1": 1},
        "ar_seconds": 0.19,
        "ar_forward_passes": 16,
        "spec_seconds": 0.1,
        "spec_forward_passes": 7,
        "spec_forwards_per_token": 0.4375,
        "spec_vs_sequential_speedup": 2.0,
        "spec_vs_ar_time_ratio": 0.526,
        "ratio_range": {"spec_vs_sequential_speedup": [1.8, 2.2], "spec_vs_ar_time_ratio": [0.5, 0.6]},
    }
    sampler = update_text("# Benchmarks\n", RESULT)
    both = update_text(sampler, spec)
    assert both.startswith(sampler) and SPEC_START in both and SPEC_END in both
    assert "| 16 / 7 / 16 | 0.438 | 2.00x [1.80x, 2.20x] | 0.526 [0.500, 0.600] |" in both
    assert update_text(both, {**spec, "spec_seconds": 0.09}).count("--speculative auto") == 1  # replaced


def test_a_graphed_run_goes_to_its_own_table_with_per_forward_times():
    from update_benchmarks_doc import GRAPH_END, GRAPH_START

    graphed = {
        **RESULT,
        "command": "aogpt bench sampler --flavor small --n 1024 --batch 32 --graphs compile --T n",
        "device": "NVIDIA H100 80GB HBM3",
        "n": 1024,
        "batch": 32,
        "dtype": "bfloat16",
        "graphs": "compile",
        "steps": [1024],
        "ao_seconds": {"1024": 0.3},
        "encoder_seconds": {"1024": 9.0},
        "ms_per_forward": {"ao 1024": 0.293, "encoder 1024": 8.789, "ar": 0.281},
        "ao_vs_encoder_speedup": 30.0,
        "ao_vs_ar_time_ratio": 1.04,
    }
    del graphed["ao_quarter_vs_ar_speedup"]  # --T n: no T=n/4 row
    sampler = update_text("# Benchmarks\n", RESULT)
    both = update_text(sampler, graphed)
    assert both.startswith(sampler) and GRAPH_START in both and GRAPH_END in both
    assert "| bfloat16, compile | 0.293 / 8.789 / 0.281 | 0.300 | 9.000 | 0.950 | 30.00x | 1.040 | - |" in both


TRAIN = {
    "command": "aogpt bench train --flavor small --seq-len 1024 --batch 8 --steps 10 --rounds 3 --warmup 3 "
    "--variants ar,ao --dtype bfloat16 --compile blocks",
    "device": "NVIDIA H100 80GB HBM3",
    "dtype": "bfloat16",
    "compile": "blocks",
    "median_step_ms": {"ar": 48.1, "ao": 51.0},
    "tokens_per_s": {"ar": 170312.0, "ao": 160498.0},
    "mfu": {"ar": 0.155, "ao": 0.146},
    "peak_memory_gib": {"ar": 9.5, "ao": 10.25},
    "ao_vs_ar_step_time_ratio": 1.079,
    "ratio_range": [1.026, 1.091],
}


def test_a_training_bench_run_gets_its_row_in_the_training_table():
    from update_benchmarks_doc import TRAIN_END, TRAIN_START

    text = update_text("# Benchmarks\n", TRAIN)
    assert TRAIN_START in text and TRAIN_END in text and START not in text
    row = next(line for line in text.splitlines() if line.startswith("| 2"))
    assert row.endswith(
        "| NVIDIA H100 80GB HBM3 | bfloat16, blocks | 48.10 | 51.00 | 170,312 / 160,498 | 15.5% / 14.6% "
        "| 9.50 / 10.25 | 1.079 [1.026, 1.091] |"
    )
    cpu = update_text(text, {**TRAIN, "device": "cpu (x, 2 threads)", "mfu": None, "peak_memory_gib": None})
    assert "| - | - | 1.079" in cpu and cpu.count("--flavor small") == 2


def test_a_run_of_both_loss_paths_gets_a_row_per_path_with_the_ar_equivalent_mfu():
    both = {
        **TRAIN,
        "command": TRAIN["command"] + " --loss-path logits,fused",
        "loss_paths": ["logits", "fused"],
        "median_step_ms": {"ar": 48.1, "ao": 51.0, "ar+fused": 45.0, "ao+fused": 47.5},
        "tokens_per_s": {"ar": 170312.0, "ao": 160498.0, "ar+fused": 182000.0, "ao+fused": 172463.0},
        "mfu": {"ar": 0.155, "ao": 0.146, "ar+fused": 0.166, "ao+fused": 0.157},
        "mfu_ar_equivalent": {"ar": 0.155, "ao": 0.140, "ar+fused": 0.166, "ao+fused": 0.151},
        "peak_memory_gib": {"ar": 9.5, "ao": 10.25, "ar+fused": 6.0, "ao+fused": 6.5},
        "by_loss_path": {
            "logits": {"ao_vs_ar_step_time_ratio": 1.079, "ratio_range": [1.026, 1.091]},
            "fused": {"ao_vs_ar_step_time_ratio": 1.055, "ratio_range": [1.04, 1.06]},
        },
    }
    text = update_text("# Benchmarks\n", both)
    rows = [line for line in text.splitlines() if line.startswith("| 2")]
    assert len(rows) == 2
    assert rows[0].endswith(
        "| bfloat16, blocks | 48.10 | 51.00 | 170,312 / 160,498 | 15.5% / 14.6% (AR-eq. 14.0%) "
        "| 9.50 / 10.25 | 1.079 [1.026, 1.091] |"
    )
    assert rows[1].endswith(
        "| bfloat16, blocks, fused loss | 45.00 | 47.50 | 182,000 / 172,463 | 16.6% / 15.7% "
        "(AR-eq. 15.1%) | 6.00 / 6.50 | 1.055 [1.040, 1.060] |"
    )
    again = update_text(text, both).splitlines()
    assert [line for line in again if line.startswith("| 2")] == rows  # a rerun replaces both rows


def test_a_profile_run_gets_one_row_with_every_category_per_variant():
    from update_benchmarks_doc import PROFILE_CATEGORIES, PROFILE_START

    def summary(wall, fractions):
        cats = {
            c: {"ms_per_step": wall * f, "fraction": f, "top": []}
            for c, f in zip(PROFILE_CATEGORIES, fractions, strict=True)
        }
        return {"wall_ms_per_step": wall, "categories": cats}

    result = {
        "command": "aogpt bench train --flavor small --profile",
        "device": "NVIDIA H100 80GB HBM3",
        "profile": {
            "ar": summary(50.0, [0.5, 0.1, 0.1, 0.15, 0.05, 0.0, 0.1]),
            "ao": summary(52.0, [0.45, 0.1, 0.1, 0.2, 0.05, 0.0, 0.1]),
        },
    }
    text = update_text("", result)
    assert PROFILE_START in text
    assert "| ar / ao | 50.00 / 52.00 | 50.0% / 45.0% | 10.0% / 10.0% | 10.0% / 10.0% | 15.0% / 20.0% |" in text


@pytest.mark.parametrize("content", ["[1]", "3", '{"command": "x"}', "not json"])
def test_a_file_that_is_no_bench_result_is_one_line(tmp_path, capsys, content):
    from update_benchmarks_doc import main

    (tmp_path / "r.json").write_text(content)
    docs = tmp_path / "bench.md"
    assert main([str(tmp_path / "r.json"), "--docs", str(docs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "is not an `aogpt bench" in err[0]
    assert not docs.exists()


REQUESTS_RESULT = {
    "command": "aogpt bench requests --flavor tiny --requests 256 --n 64 --batch-sizes 1,8,32 --repeats 2 --json",
    "device": "cpu (test, 1 threads)",
    "model": "tiny",
    "n": 64,
    "requests": 256,
    "dtype": "float32",
    "graphs": "off",
    "batch_sizes": [1, 8, 32],
    "tokens_per_second": {"1": 100.0, "8": 400.0, "32": 900.0},
    "speedup_vs_first": {"8": 4.0, "32": 9.0},
    "speedup_range": {"8": [3.9, 4.1], "32": [8.8, 9.2]},
    "same_tokens_at_every_batch_size": True,
    "repeats": 2,
}


def test_a_batched_requests_run_goes_to_its_own_table():
    from update_benchmarks_doc import REQUESTS_END, REQUESTS_START

    text = update_text(update_text("", RESULT), REQUESTS_RESULT)
    section = text[text.index(REQUESTS_START) : text.index(REQUESTS_END)]
    assert "| 1: 100.0, 8: 400.0, 32: 900.0 | 8: 4.00x [3.90x, 4.10x]; 32: 9.00x [8.80x, 9.20x] | yes |" in section
    assert "| tiny | 256, 64 | float32, off |" in section and "--flavor tiny --n 64 --batch 1" not in section
    broken = update_text(text, {**REQUESTS_RESULT, "same_tokens_at_every_batch_size": False})
    assert broken.count("--requests 256") == 1 and "| NO |" in broken  # replaced, and a failure shows
