"""Device helpers shared by the sampler, its CLI and the benchmark."""

from __future__ import annotations

import platform

import torch

from ..errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda if available else cpu; a named device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device={name!r} is not a device; allowed: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={name!r} is not available here (no CUDA); allowed: auto, cpu")
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"device={name!r} is not supported; allowed: auto, cpu, cuda, cuda:N")
    return device


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UserError(f"dtype={name!r} is not supported; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


def device_name(device: torch.device) -> str:
    """What a benchmark row should say about the hardware."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"cpu ({cpu}, {torch.get_num_threads()} threads)"


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so wall-clock timings cover the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
