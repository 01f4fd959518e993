"""The findings study runs end to end (a few steps per variant) and reuses finished work when re-run."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "reproduce_findings.py"
VARIANTS = ("ar", "ao_uniform", "ao_mix10", "fixed_random", "blockwise4", "sigma_concat")


def run(out, docs, *extra):
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--jobs", "3", "--out", str(out), "--docs", str(docs), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_smoke_study_writes_report_plots_and_reuses_cached_variants(tmp_path):
    out, docs = tmp_path / "study", tmp_path / "docs" / "findings.md"
    first = run(out, docs)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = docs.read_text()
    for heading in (
        "Finding 1",
        "Finding 2",
        "Findings 3.1",
        "Appendix B.3.1",
        "Appendix B.3.2",
        "Finding 6",
        "Table 1",
    ):
        assert heading in report
    assert "Smoke run" in report and "python scripts/reproduce_findings.py --smoke" in report
    pngs = sorted(p.name for p in (docs.parent / "findings").glob("*.png"))
    assert pngs == sorted(
        ["f1_ar_vs_ao.png", "f2_fixed_orders.png", "f3_l2r_mixture.png", "b31_adaln_vs_concat.png", "b32_ema.png"]
    )
    for v in VARIANTS:
        evals = json.loads((out / v / "eval.json").read_text())
        assert evals["ppl/ema/ptb/l2r"]["ppl"] > 1
        assert (out / v / "model_ema" / "model.safetensors").exists()
    extras = json.loads((out / "extras.json").read_text())
    assert [r["M"] for r in extras["ensemble"]["ensemble"]] == [1, 2, 4, 8]
    assert extras["sampler_bench"]["ao_vs_encoder_speedup"] > 0

    second = run(out, docs, "--stage", "all")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("cached") == len(VARIANTS)  # no variant is retrained
    assert "train ar: -m" not in second.stdout


def test_unknown_variant_is_a_one_line_error(tmp_path):
    result = run(tmp_path, tmp_path / "f.md", "--variants", "ar,gpt5")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --variants has unknown 'gpt5'; allowed: " + ", ".join(VARIANTS)
