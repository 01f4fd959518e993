"""torchtitan 0.3 tests: they run under a venv with torchtitan 0.3 (`make test-titan03`) and skip
under 0.2.2. The CPU shims go in before any test imports torchtitan's trainer."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

import pytest


def _torchtitan() -> str:
    try:
        return version("torchtitan")
    except PackageNotFoundError:
        return ""


TITAN03 = _torchtitan().startswith("0.3")
needs_titan03 = pytest.mark.skipif(not TITAN03, reason=f"needs torchtitan 0.3 (installed: {_torchtitan() or 'none'})")
STEP_LINE = re.compile(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)")


@pytest.fixture(scope="session")
def titan03_on_cpu():
    from aogpt_plugin.training.titan03.cpu import enable_cpu

    enable_cpu()


def printed_losses(text: str) -> dict[int, str]:
    """{step: the loss as the metrics line printed it} (colour off)."""
    return {int(s): v for s, v in STEP_LINE.findall(text)}
