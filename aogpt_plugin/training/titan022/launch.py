"""What the shared launcher (../launcher.py) needs from torchtitan 0.2.2, with the interface of
titan03/launch.py: the CPU shims, the parsed JobConfig and its run settings (settings.py), the names
preflight checks against, and the run: torchtitan.train's own main, on the JobConfig parsed and checked.

Without an accelerator, the shared CPU support (../cpu.py) is applied to the modules 0.2.2 copies the
device into, after a stub for the triton kernels `import torchtitan` reaches. torchtitan logs every
line on every rank: rank 0 keeps its lines (others: warnings) unless AOGPT_LOG_ALL_RANKS=1, and every
rank drops the known noise (../console.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..console import quiet_known_noise
from ..cpu import has_accelerator, point_device_copies_at_cpu, stub_triton_module
from ..sections import RunSettings
from .config_parser import parse_job_config as _parse
from .config_parser import registered_names  # noqa: F401  (part of the interface)
from .settings import share_settings

# modules that copy `device_type` / `device_module` from torchtitan.tools.utils at import time
_COPIES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.tools.profiling",
)


def enable_torchtitan_on_cpu() -> None:
    """Apply the shims (idempotent). Call before `import torchtitan.train`: `import torchtitan` imports
    triton through `torchtitan.models.moe.kernels` (MoE only)."""
    stub_triton_module("torchtitan.models.moe.kernels", "MoE token permutation")
    point_device_copies_at_cpu(_COPIES)


def enable_cpu() -> None:
    if not has_accelerator():
        enable_torchtitan_on_cpu()


def parse_command_line(argv: list[str]) -> tuple[object, RunSettings]:
    """(the JobConfig of `argv`, its run settings, built once and held by it)."""
    job_config = _parse(argv)
    return job_config, share_settings(job_config)


def _quiet_other_ranks(titan, rank: int) -> None:
    quiet_known_noise(has_accelerator())
    if rank == 0 or os.environ.get("AOGPT_LOG_ALL_RANKS") == "1":
        return
    init_logger = titan.init_logger

    def init_quiet_logger():
        init_logger()
        logging.getLogger().setLevel(logging.WARNING)

    titan.init_logger = init_quiet_logger


def trainer_for(rank: int, job_config) -> Callable[[], None]:
    """`torchtitan.train`'s own main, with the logs quieted, run on `job_config` (the JobConfig the
    launcher parsed and checked, holding the run's settings): its parse of sys.argv returns it."""
    import torchtitan.train as titan

    _quiet_other_ranks(titan, rank)

    class Parsed(titan.ConfigManager):
        def parse_args(self, args=None):
            return job_config

    titan.ConfigManager = Parsed
    return lambda: titan.main(titan.Trainer)
