"""torchtitan 0.3 on a machine without an accelerator: the shared CPU support (../cpu.py) applied to
the modules 0.3 copies the device into.

`import torchtitan.trainer` reaches `distributed.minimal_async_ep.kernels`, which imports triton (MoE
expert parallelism only): torch's CUDA builds ship triton, its CPU wheels do not, and there a stub
stands in. Stock `-m torchtitan.train` imports the trainer before `--module`, so it needs a torch
with triton on a CPU too; the config functions (aogpt_plugin/config_registry.py) then apply the rest
here before the Trainer is built, as the launcher does before anything is imported.
"""

from __future__ import annotations

from ..console import quiet_known_noise, quiet_known_warnings
from ..cpu import has_accelerator, point_device_copies_at_cpu, stub_triton_module

# modules that copy `device_type` / `device_module` from torchtitan.tools.utils at import time
_COPIES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.models.common.token_dispatcher",
    "torchtitan.tools.profiler",
)


def enable_torchtitan_on_cpu() -> None:
    """Apply the shims (idempotent); before the Trainer is built."""
    stub_triton_module("torchtitan.distributed.minimal_async_ep.kernels", "MoE expert parallelism")
    point_device_copies_at_cpu(_COPIES)


def enable_cpu() -> None:
    """The shims on a machine without an accelerator, with the known noise quieted first. The launcher
    calls it before torchtitan is imported, the config functions before the Trainer is built."""
    quiet_known_noise(has_accelerator())
    quiet_known_warnings()
    if not has_accelerator():
        enable_torchtitan_on_cpu()
