"""Run torchtitan 0.2.2 on a machine without an accelerator, without editing site-packages.

Three things stop it (each verified on torch 2.13 CPU; docs/training.md, "CPU notes"):
1. `import torchtitan` imports triton through `torchtitan.models.moe.kernels` (MoE only): a stub
   module stands in when triton is not installed.
2. `torchtitan.tools.utils` fixes `device_type = "cuda"` at import time and several modules copy
   it, plus a `device_module` whose memory-stat calls torch.cpu lacks: both are replaced by "cpu"
   and a small CPU stand-in.
3. gloo rejects the PREMUL_SUM reduction FSDP2 derives from torchtitan's gradient divide factor:
   handled in infra/parallelize.py by forcing SUM reductions on CPU meshes.
The metrics stay honest on CPU: memory is the process's resident set (peak since the last log),
never a negative placeholder, and MFU is measured against this machine's own fp32 matmul peak
(timed once at start-up and logged as such) instead of an A100's.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import sys
import time
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
        peak = _peak_rss_bytes()
        return {"active_bytes.all.peak": peak, "reserved_bytes.all.peak": peak, "num_alloc_retries": 0, "num_ooms": 0}

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        try:  # Linux: "5" resets the peak resident set size (VmHWM) of this process
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def synchronize(device=None) -> None:
        return None


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process since the last reset (Linux), else its lifetime peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@functools.cache
def measured_cpu_peak_flops() -> float:
    """This machine's fp32 matmul rate with the current threads (best of a few 512^3 products)."""
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    best = float("inf")
    for _ in range(6):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    flops = 2 * 512**3 / best
    logging.getLogger().info(
        f"CPU run: MFU is against this machine's measured fp32 matmul peak, {flops / 1e9:.1f} GFLOP/s "
        f"({torch.get_num_threads()} threads), not a GPU's"
    )
    return flops


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
    utils = importlib.import_module("torchtitan.tools.utils")
    if not getattr(utils.get_peak_flops, "aogpt_cpu", False):
        gpu_peak_flops = utils.get_peak_flops

        def get_peak_flops(device_name: str) -> float:
            return measured_cpu_peak_flops() if device_name == "cpu" else gpu_peak_flops(device_name)

        get_peak_flops.aogpt_cpu = True
        utils.get_peak_flops = get_peak_flops
