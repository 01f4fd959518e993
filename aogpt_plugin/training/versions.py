"""Which torchtitan is installed: the one fact that picks the glue (titan022/ or titan03/) and that a
checkpoint record keeps, so that a checkpoint 0.2.2 cannot resume is refused before it loads."""

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
    """torchtitan 0.3.0 imports `torch.distributed.fsdp.DataParallelMeshDims`, which torch 2.11 lacks
    (seen on the GPU image); say so in one line instead of an ImportError on every rank."""
    import torch.distributed.fsdp as fsdp

    if is_titan03() and not hasattr(fsdp, "DataParallelMeshDims"):
        import torch

        raise ConfigError(
            f"torchtitan {torchtitan_version()} needs a torch with torch.distributed.fsdp.DataParallelMeshDims "
            f"(2.13 has it) and this is torch {torch.__version__}; install a newer torch, or torchtitan 0.2.2 "
            "(pip install -e '.[titan022]')"
        )
