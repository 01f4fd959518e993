"""Run torchtitan 0.3 on a machine without an accelerator, without editing site-packages.

What 0.2.2 needed (titan022/cpu.py: device_type "cpu", a CPU device module, no MFU) plus two 0.3 changes:
1. `import torchtitan.trainer` reaches `distributed.minimal_async_ep.kernels`, which imports triton
   (MoE expert parallelism only): a stub stands in whose kernels raise if ever called.
2. `distributed.utils.set_pg_timeouts` calls `torch.distributed.set_timeout`, which torch 2.13 lacks:
   it is provided from `distributed_c10d._set_pg_timeout` (what 0.2.2 called).
Call before `import torchtitan.trainer`, which stock `python -m torchtitan.train` cannot do: on a CPU
it dies on triton before `--module` is imported, so CPU runs go through `python -m aogpt_plugin.train`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from ..titan022.cpu import has_accelerator, point_device_copies_at_cpu

# modules that copy `device_type` / `device_module` from torchtitan.tools.utils at import time
_COPIES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.models.common.token_dispatcher",
    "torchtitan.tools.profiler",
)
_KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"


def _stub_triton_kernels() -> None:
    if importlib.util.find_spec("triton") is not None or _KERNELS in sys.modules:
        return
    stub = types.ModuleType(_KERNELS)

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def kernel(*args, **kwargs):
            raise RuntimeError(f"{name} needs triton (MoE expert parallelism), which this CPU run lacks")

        return kernel

    stub.__getattr__ = __getattr__
    sys.modules[_KERNELS] = stub


def _provide_set_timeout() -> None:
    import torch.distributed as dist

    if hasattr(dist, "set_timeout"):
        return
    from torch.distributed import distributed_c10d as c10d

    def set_timeout(timeout, group=None) -> None:
        try:
            c10d._set_pg_timeout(timeout, group)
        except Exception:  # gloo keeps its own timeout (0.2.2 only warned)
            pass

    dist.set_timeout = set_timeout


def enable_torchtitan_on_cpu() -> None:
    """Apply the shims (idempotent). Call before `import torchtitan.trainer`."""
    _stub_triton_kernels()
    _provide_set_timeout()
    point_device_copies_at_cpu(_COPIES)


__all__ = ["enable_torchtitan_on_cpu", "has_accelerator"]
