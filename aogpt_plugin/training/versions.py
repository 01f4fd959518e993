"""Which torchtitan is installed: the one fact that picks the glue (titan022/ or titan03/) and that a
checkpoint record keeps, so that a checkpoint 0.2.2 cannot resume is refused before it loads; and the
torch torchtitan 0.3 needs."""

import re
from importlib.metadata import PackageNotFoundError, version

from ..errors import ConfigError


def torchtitan_version() -> str:
    """The installed torchtitan's version ("" when none is)."""
    try:
        return version("torchtitan")
    except PackageNotFoundError:
        return ""


def is_titan03() -> bool:
    return torchtitan_version().startswith("0.3")


# torchtitan 0.3.0 calls `torch.distributed.set_timeout`, public since torch 2.14 (the `titan03` extra
# in pyproject.toml requires the same; tests/training/test_versions.py keeps the two equal).
TORCH_FOR_TITAN03 = (2, 14)


def _release(version_text: str) -> tuple[int, ...]:
    """(2, 14) of "2.14.1+cu130" or "2.14.0a0+git1234"."""
    match = re.match(r"(\d+)\.(\d+)", version_text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


TORCHTITAN_MISSING = (
    "training needs torchtitan, which is not installed in this Python; install one of the training extras: "
    "pip install 'aogpt[titan022]' (torchtitan 0.2.2) or pip install 'aogpt[titan03]' (torchtitan 0.3); "
    "from a clone: pip install -e '.[titan022]'"
)


def check_torchtitan_installed() -> None:
    """Training needs torchtitan, an extra of the package (sampling and evaluation do not): without it,
    one line naming the extras instead of a ModuleNotFoundError traceback. Found, not imported (its
    import needs the CPU shims first)."""
    from importlib.util import find_spec

    try:
        found = find_spec("torchtitan") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(TORCHTITAN_MISSING)


def check_torch_for_titan03() -> None:
    """Under torchtitan 0.3, a torch older than TORCH_FOR_TITAN03 is one ConfigError line naming both
    versions, before torchtitan builds anything (0.3 would fail at `set_timeout`, or at an import torch
    2.11 lacks, on every rank). The launcher and the config functions (config_registry.py) ask."""
    if not is_titan03():
        return
    import torch

    if _release(torch.__version__) < TORCH_FOR_TITAN03:
        need = ".".join(map(str, TORCH_FOR_TITAN03))
        raise ConfigError(
            f"torchtitan {torchtitan_version()} needs torch >= {need} and this is torch {torch.__version__}; "
            f"allowed: pip install 'torch>={need}' (on GPUs a CUDA build), or torchtitan 0.2.2 "
            "(pip install -e '.[titan022]')"
        )
