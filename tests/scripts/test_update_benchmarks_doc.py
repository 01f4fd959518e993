"""The benchmark's rows in docs/benchmarks.md: only the marked section changes (the bench itself is no test)."""

from __future__ import annotations

import sys

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
