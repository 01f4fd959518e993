"""scripts/gpt2_start_study.py end to end at smoke size (the stand-in GPT-2, four variants x two seeds of a few
steps, WikiText-2 in both readings, an infill): it writes its block of findings.md and its plots, leaves the
rest of the file as it was, and reuses finished work when re-run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpt2_start_study.py"
BEGIN, END = "<!-- kept: gpt2_start_study -->", "<!-- end kept -->"


def run(out, docs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out), "--docs", str(docs)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_smoke_study_writes_its_block_and_plots_and_reuses_cached_runs(tmp_path):
    pytest.importorskip("transformers")
    out, docs = tmp_path / "study", tmp_path / "docs" / "findings.md"
    docs.parent.mkdir()
    docs.write_text("# Reproducing the paper's findings\n\nThe main study's report.\n")
    first = run(out, docs)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    text = docs.read_text()
    assert text.startswith("# Reproducing the paper's findings\n\nThe main study's report.\n")
    assert text.count(BEGIN) == 1 and text.rstrip().endswith(END) and "## Starting from GPT-2" in text
    for variant in ("| scratch |", "| scratch_curriculum |", "| gpt2 |", "| gpt2_curriculum |", "stand-in GPT-2"):
        assert variant in text, variant
    assert "**Verdict.**" in text and any(f"**{w}**" in text for w in ("better", "worse", "inconclusive"))
    assert {p.name for p in (docs.parent / "findings").glob("gpt2_start_*.png")} == {
        "gpt2_start_curves.png",
        "gpt2_start_wikitext.png",
    }
    assert "python scripts/gpt2_start_study.py --smoke" in text  # the command beside the figures

    docs.write_text(text + "\nA later paragraph.\n")
    second = run(out, docs)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "train " not in second.stdout and "stand-in GPT-2:" not in second.stdout  # all reused
    again = docs.read_text()
    assert again.count(BEGIN) == 1 and again.endswith("A later paragraph.\n")
