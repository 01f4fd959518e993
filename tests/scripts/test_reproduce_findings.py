"""The findings study runs end to end (a few steps of a few variants), writes its report and plots,
and reuses finished work when re-run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "reproduce_findings.py"
SMOKE_RUNS = ("ar_s0", "ao_random_s0", "sigma_concat_s0", "sigma_concat_s1")
SMOKE_RUNS += tuple(f"{v}_s{k}" for v in ("syn_ar", "syn_ao_random") for k in range(3))  # 3 seeds per synthetic variant


def run(out, docs, *extra):
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out), "--docs", str(docs), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_smoke_study_writes_report_plots_and_reuses_cached_runs(tmp_path):
    out, docs = tmp_path / "study", tmp_path / "docs" / "findings.md"
    first = run(out, docs)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = docs.read_text()
    for heading in (
        "Does each model use its context?",
        "Synthetic track",
        "Finding 1",
        "Appendix B.3.1",
        "Finding 6",
        "Table 1",
    ):
        assert heading in report, heading
    assert "Smoke run" in report
    assert "**reproduced**" in report or "**inconclusive**" in report or "**contradicted**" in report
    assert {p.name for p in (docs.parent / "findings").glob("*.png")} >= {
        "context_gain.png",
        "synthetic.png",
        "f1_ar_vs_ao.png",
    }
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == set(SMOKE_RUNS)
    syn = results["runs"]["syn_ao_random_s0"]
    assert 0 < syn["optimum"] < syn["unigram_entropy"]
    assert results["zero_shot"]["ar_s0"]["ptb_l2r"]["bits_per_byte"] > 0
    assert len(results["ensemble"]["sizes"]) == 2 and results["generation"]

    kept = "<!-- kept: another_study -->\n## Another study\n\nits text\n<!-- end kept -->"
    docs.write_text(docs.read_text() + "\n" + kept + "\n")  # a block another script writes (gpt2_start_study.py)
    second = run(out, docs)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "train " not in second.stdout  # nothing is retrained or re-evaluated
    assert "  ao_random_s0/" not in second.stdout
    assert docs.read_text().count(kept) == 1 and "Finding 1" in docs.read_text()  # rewritten, the block kept


def test_unknown_variant_is_a_one_line_error(tmp_path):
    result = run(tmp_path, tmp_path / "f.md", "--variants", "ar,gpt5")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --variants 'gpt5' is unknown; allowed: ar, ar_adaln, ao_random")


def test_power_law_fit_recovers_a_known_curve_and_not_a_flat_one():
    """The fit behind the report's "steps to the gap goal" (scripts/findings_report.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from findings_report import power_law

    a, b = power_law({st: 2.0 * st**-0.5 for st in (1000, 1500, 2000, 3000)})
    assert a == pytest.approx(2.0) and b == pytest.approx(0.5)
    a, b = power_law({st: 0.7 for st in (1000, 2000, 3000)})  # no fall: exponent 0, the goal is never reached
    assert b == pytest.approx(0.0, abs=1e-12)


def test_gap_fit_uses_only_the_constant_lr_stretch_past_the_plateau():
    """The sweep's extrapolation fits the second half of a run's constant-lr stretch, and only points off
    the plateau; a run that never left it gets no fit."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from findings_report import gap_fit

    curve = {st: 3.0 * st**-0.25 for st in range(250, 4001, 250)}
    curve.update({1750: 2.25, 2000: 2.25})  # plateau points (gap 2.25 = the plateau) would bend the fit
    a, b, points = gap_fit(curve, 4000, plateau=2.25)
    assert min(points) == 2250 and max(points) == 3000  # decay starts at 3200 (decay_ratio 0.2)
    assert a == pytest.approx(3.0) and b == pytest.approx(0.25)
    assert gap_fit({st: 2.2 for st in range(250, 4001, 250)}, 4000, plateau=2.25)[:2] == (0.0, 0.0)


def test_a_run_trained_by_another_recipe_is_retrained_and_kept_beside(tmp_path, monkeypatch):
    """The training cache is keyed by the command and the recipe's bytes: an edited recipe retrains its
    runs, and the old run folder is moved aside, never resumed or overwritten."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import reproduce_findings as rf

    recipes = tmp_path / "train_configs" / "study"
    recipes.mkdir(parents=True)
    (recipes / "syn_ar.toml").write_text("steps = 1\n")
    monkeypatch.setattr(rf, "ROOT", tmp_path)
    calls = []

    def fake_train(cmd, cwd, stdout, stderr, env):
        calls.append(cmd)
        (tmp_path / "out" / "syn_ar_s0").mkdir(parents=True, exist_ok=True)
        (tmp_path / "out" / "syn_ar_s0" / "weights").write_text(str(len(calls)))
        return 0

    monkeypatch.setattr(rf.subprocess, "call", fake_train)
    out = tmp_path / "out"
    out.mkdir()
    plan = {"overrides": []}
    rf.train_run("syn_ar_s0", "syn_ar", 0, out, plan, tmp_path / "tok.json")
    rf.train_run("syn_ar_s0", "syn_ar", 0, out, plan, tmp_path / "tok.json")
    assert len(calls) == 1  # cached
    (recipes / "syn_ar.toml").write_text("steps = 2\n")
    rf.train_run("syn_ar_s0", "syn_ar", 0, out, plan, tmp_path / "tok.json")
    assert len(calls) == 2
    (stale,) = out.glob("syn_ar_s0.stale-*")
    assert (stale / "weights").read_text() == "1" and (out / "syn_ar_s0" / "weights").read_text() == "2"

    (out / "syn_ar_s0" / "DONE.json").unlink()  # an interrupted run (no DONE.json) resumes in its own folder
    rf.train_run("syn_ar_s0", "syn_ar", 0, out, plan, tmp_path / "tok.json")
    assert len(calls) == 3 and len(list(out.glob("syn_ar_s0.stale-*"))) == 1
    assert (out / "syn_ar_s0" / "weights").read_text() == "3"


def test_a_missing_recipe_is_a_one_line_error_before_any_work(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    import reproduce_findings as rf

    monkeypatch.setattr(rf, "ROOT", tmp_path)  # a checkout without train_configs/study
    monkeypatch.setattr(rf, "train_tokenizer", lambda out: pytest.fail("work started before the check"))
    assert rf.main(["--out", str(tmp_path / "o"), "--variants", "syn_ar"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: recipe train_configs/study/syn_ar.toml is missing")
