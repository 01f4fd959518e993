"""Run torchtitan 0.2.2 on a machine without an accelerator, without editing site-packages.

Three things stop it (each verified on torch 2.13 CPU; docs/training.md, "CPU notes"):
1. `import torchtitan` imports triton through `torchtitan.models.moe.kernels` (MoE only): a stub
   module stands in when triton is not installed.
2. `torchtitan.tools.utils` fixes `device_type = "cuda"` at import time and several modules copy
   it, plus a `device_module` whose memory-stat calls torch.cpu lacks: both are replaced by "cpu"
   and a small CPU stand-in.
3. gloo rejects the PREMUL_SUM reduction FSDP2 derives from torchtitan's gradient divide factor:
   handled in infra/parallelize.py by forcing SUM reductions on CPU meshes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

import torch

# modules that copy `device_type` / `device_module` from torchtitan.tools.utils at import time
_COPIES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.tools.profiling",
)


class _CPUDeviceProperties:
    def __init__(self) -> None:
        try:
            self.total_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            self.total_memory = 1 << 34


class CPUDeviceModule(types.SimpleNamespace):
    """The slice of `torch.cuda`'s API torchtitan calls, answered for the CPU."""

    @staticmethod
    def set_device(device) -> None:
        return None

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def get_device_name(device=None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device=None) -> _CPUDeviceProperties:
        return _CPUDeviceProperties()

    @staticmethod
    def memory_stats(device=None) -> dict:
        return {}

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def synchronize(device=None) -> None:
        return None


def has_accelerator() -> bool:
    return torch.cuda.is_available()


def _stub_triton_kernels() -> None:
    if importlib.util.find_spec("triton") is not None:
        return
    name = "torchtitan.models.moe.kernels"
    if name in sys.modules:
        return
    stub = types.ModuleType(name)

    def generate_permute_indices(*args, **kwargs):
        raise RuntimeError("MoE token permutation needs triton, which is not installed (CPU run)")

    stub.generate_permute_indices = generate_permute_indices
    sys.modules[name] = stub


def enable_torchtitan_on_cpu() -> None:
    """Apply patches 1 and 2 (idempotent). Call before `import torchtitan.train`."""
    _stub_triton_kernels()
    shim = CPUDeviceModule()
    for name in _COPIES:
        mod = importlib.import_module(name)
        if hasattr(mod, "device_type"):
            mod.device_type = "cpu"
        if hasattr(mod, "device_module"):
            mod.device_module = shim
