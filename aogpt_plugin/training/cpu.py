"""torchtitan on a machine without an accelerator, for both versions, without editing site-packages.

What every version needs (each verified on a CPU; docs/training.md, "CPU notes"):
1. `torchtitan.tools.utils` fixes `device_type = "cuda"` at import time and several modules copy
   it, plus a `device_module` whose memory-stat calls torch.cpu lacks: `point_device_copies_at_cpu`
   replaces both by "cpu" and a small CPU stand-in in the modules the version's glue names
   (titan022/launch.py, titan03/cpu.py, which also stub the triton kernels their imports reach).
2. gloo rejects the PREMUL_SUM reduction FSDP2 derives from torchtitan's gradient divide factor:
   handled in parallelize.py (use_sum_reduction_on_gloo) by forcing SUM reductions on CPU meshes.
The metrics stay honest on CPU: memory is the process's resident set (peak since the last log),
never a negative placeholder, and there is no MFU: a CPU has no published peak, and a peak timed
at start-up on a shared machine (512^3 matmuls) read 9 GFLOP/s in one run and 155 in another, so
MFU read up to 171%. The metrics line and TensorBoard keep `tflops` (model FLOP/s achieved); see
`without_cpu_mfu`.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
import types

import torch


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


MFU_METRIC = "mfu(%)"  # torchtitan's TensorBoard / WandB key
_MFU_IN_LINE = re.compile(r"\s*(\x1b\[[0-9;]*m)?mfu: [^%\s]*%")
NO_CPU_MFU = "CPU run: no MFU (a CPU has no stable peak FLOP/s to divide by); tflops is the model FLOP/s achieved"


class _NoCPUMFULines(logging.Filter):
    """Drops the MFU from torchtitan's metrics line and replaces its "Peak FLOPS" line (CPU runs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            if record.msg.startswith("Peak FLOPS used for computing MFU"):
                record.msg, record.args = NO_CPU_MFU, ()
            elif "mfu: " in record.msg:
                record.msg = _MFU_IN_LINE.sub("", record.msg)
        return True


class _WithoutMFU:
    """A metric logger (TensorBoard, WandB) that never receives torchtitan's MFU on a CPU."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def log(self, metrics: dict, step: int) -> None:
        self.inner.log({k: v for k, v in metrics.items() if k != MFU_METRIC}, step)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def without_cpu_mfu() -> None:
    """No MFU on CPU: the peak is NaN (a stray use reads nan, never a made-up percentage), the
    metrics line loses its `mfu:` field and the metric loggers the `mfu(%)` scalar (idempotent)."""
    utils = importlib.import_module("torchtitan.tools.utils")
    if not getattr(utils.get_peak_flops, "aogpt_cpu", False):
        gpu_peak_flops = utils.get_peak_flops

        def get_peak_flops(device_name: str) -> float:
            return float("nan") if device_name == "cpu" else gpu_peak_flops(device_name)

        get_peak_flops.aogpt_cpu = True
        utils.get_peak_flops = get_peak_flops
    processor = importlib.import_module("torchtitan.components.metrics").MetricsProcessor
    if not getattr(processor.__init__, "aogpt_cpu", False):
        init = processor.__init__

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.logger = _WithoutMFU(self.logger)

        __init__.aogpt_cpu = True
        processor.__init__ = __init__
    root = logging.getLogger()  # torchtitan logs through the root logger
    if not any(isinstance(f, _NoCPUMFULines) for f in root.filters):
        root.addFilter(_NoCPUMFULines())


def has_accelerator() -> bool:
    return torch.cuda.is_available()


def stub_triton_module(name: str, what: str) -> None:
    """Without triton (torch's CPU wheels), module `name`, which imports it for `what` only, is replaced by
    a stub whose functions raise if ever called (idempotent; before the module is first imported)."""
    if importlib.util.find_spec("triton") is not None or name in sys.modules:
        return
    stub = types.ModuleType(name)

    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def kernel(*args, **kwargs):
            raise RuntimeError(f"{attr} needs triton ({what}), which this CPU run lacks")

        return kernel

    stub.__getattr__ = __getattr__
    sys.modules[name] = stub


def point_device_copies_at_cpu(module_names) -> None:
    """torchtitan modules copy the device type/module at import; point those copies at the CPU (both
    versions do this, with their own module lists), and drop the MFU a CPU cannot measure."""
    shim = CPUDeviceModule()
    for name in module_names:
        mod = importlib.import_module(name)
        if hasattr(mod, "device_type"):
            mod.device_type = "cpu"
        if hasattr(mod, "device_module"):
            mod.device_module = shim
    without_cpu_mfu()
