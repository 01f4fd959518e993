"""The README's Train and Convert sections run verbatim, in order, in a fresh copy of the repository.

A newcomer runs them after `make demo`; each block must work as written (distinct dump folders,
paths that exist). Slow: it trains the debug recipe three times (1 process, FSDP2, compile).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED_DATA


def readme_blocks(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", body, flags=re.S)


def test_the_sections_hold_the_commands_a_newcomer_needs():
    train, convert = readme_blocks("Train"), readme_blocks("Convert, sample, evaluate")
    assert any("python -m aogpt_plugin.train" in b for b in train)
    assert any("aogpt convert" in b and "aogpt eval genppl" in b for b in convert)
    dumps = re.findall(r"--job\.dump_folder (\S+)", "".join(train))
    assert len(dumps) == len(set(dumps)) == 3  # each extra run has a folder of its own


@pytest.mark.slow
def test_train_and_convert_blocks_run_verbatim_in_order(tmp_path):
    clone = tmp_path / "repo"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv*", "outputs", "__pycache__", ".whl"))
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # ../shared beside the copy, as in CI
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(clone),
        "TIKTOKEN_CACHE_DIR": str(SHARED_DATA / "tiktoken_cache"),
        "AOGPT_DATA_DIR": str(SHARED_DATA),
        "OMP_NUM_THREADS": "1",
    }
    for section in ("Train", "Convert, sample, evaluate"):
        for block in readme_blocks(section):
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            assert proc.returncode == 0, f"{section} block failed:\n{block}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
