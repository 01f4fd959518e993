"""scripts/speculative_quality.py: three samplers of one model scored by another, with SEs and 2-SE agreement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import tiny_model

from aogpt_plugin.model_dir import save_model

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "speculative_quality.py"


def test_rows_for_t_n_speculative_and_t_n_over_4(tmp_path):
    save_model(tiny_model("adaln", max_seq_len=8, preset="sampler"), str(tmp_path / "ao"), tokenizer="symbols:61")
    save_model(tiny_model("none", max_seq_len=8, preset="sampler"), str(tmp_path / "ar"), tokenizer="symbols:61")
    argv = ["--model", str(tmp_path / "ao"), "--scorer", str(tmp_path / "ar"), "--length", "8", "--samples", "12"]
    argv += ["--batch-size", "4", "--json", str(tmp_path / "q.json")]
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "q.json").read_text())
    assert list(out) == ["T=n=8", "speculative auto", "T=n/4=2"]
    assert out["T=n=8"]["forwards_per_batch"] == 8 and out["T=n/4=2"]["forwards_per_batch"] == 2
    assert 1 <= out["speculative auto"]["forwards_per_batch"] <= 8
    for name in ("speculative auto", "T=n/4=2"):
        d, se, words = out[name]["nll_vs_t_n"]
        assert se > 0 and ("within 2 SE" in words) == (abs(d) <= 2 * se)
    assert "| speculative auto |" in done.stdout and "--speculative auto" in done.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), *argv[:7], "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --samples 1")
