"""torchtitan 0.2.2 on a machine without an accelerator: the shared CPU support (../cpu.py) applied to
the modules 0.2.2 copies the device into, after a stub for the triton kernels `import torchtitan` reaches."""

from __future__ import annotations

from ..cpu import point_device_copies_at_cpu, stub_triton_module

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
