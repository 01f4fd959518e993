"""The sampler runs with no torchtitan import and no process group."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sampler_runs_without_torchtitan(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        import torch
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import aogpt_plugin.sampler, aogpt_plugin.model_dir
        from aogpt_plugin.model_dir import load_model_dir, save_model
        from aogpt_plugin.sampler import SampleConfig, generate
        from conftest import tiny_model
        save_model(tiny_model(preset="sampler"), {str(tmp_path / "m")!r})
        model = load_model_dir({str(tmp_path / "m")!r}).model
        result = generate(model, SampleConfig(length=12, steps=3, num_samples=2))
        assert result.tokens.shape == (2, 12)
        assert "torchtitan" not in sys.modules, "torchtitan was imported"
        assert not torch.distributed.is_initialized()
        print("ok")
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
