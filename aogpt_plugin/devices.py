"""Where and how a command runs: device and dtype resolution, and the flags every command shares.

`aogpt sample`, `aogpt eval ppl` and `aogpt eval genppl` take the same `--device/--dtype/--json/
--no-progress` flags (`add_runtime_args`); the benchmarks resolve devices and name the hardware
with the same functions, so a row says exactly what it ran on. torch is imported only by the
functions that need it, so `aogpt COMMAND --help` answers without loading it.
"""

from __future__ import annotations

import json
import math
import platform
import sys
from typing import TYPE_CHECKING

from .errors import UserError

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16", "float16")  # names of torch dtypes


def resolve_device(name: str | None = "auto") -> torch.device:
    """'auto' (or None) -> cuda if available else cpu; a named device must exist."""
    import torch

    if name is None or name == "auto":
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
    import torch

    if name not in DTYPES:
        raise UserError(f"dtype={name!r} is not supported; allowed: {', '.join(DTYPES)}")
    return getattr(torch, name)


def device_name(device: torch.device) -> str:
    """What a benchmark row should say about the hardware."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"cpu ({cpu}, {torch.get_num_threads()} threads)"


def available_memory(device: torch.device) -> int | None:
    """Bytes a command can still allocate on `device` (None: unknown), to refuse a job that cannot fit
    before it starts instead of swapping for hours."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so wall-clock timings cover the work."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def add_runtime_args(p, dtype_default: str = "float32") -> None:
    """The flags of every command that loads a model: where it runs, how it reports, whether the
    model folder's weights are checked against their recorded sha256."""
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=dtype_default, help=f"default {dtype_default}")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_verify_arg(p)


def add_verify_arg(p) -> None:
    """`--no-verify`: load a model folder whose model.safetensors no longer matches its config.json."""
    p.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip the sha256 check of model.safetensors against config.json",
    )


class Reporter:
    """Human-readable lines: stdout normally, stderr under --json so stdout holds only the JSON object."""

    def __init__(self, json_mode: bool):
        self.stream = sys.stderr if json_mode else sys.stdout

    def __call__(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _finite_or_null(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


def print_json(record: dict) -> None:
    """The one JSON object of `--json`, valid JSON: a NaN/inf float (say an overflowing perplexity) is null."""
    print(json.dumps(_finite_or_null(record)))
