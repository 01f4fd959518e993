"""What a run prints, made readable on both torchtitan versions: the log lines and warnings every run
printed that say nothing about it are dropped, and tyro's boxed usage error becomes one line.

Everything is matched by message, so anything else these loggers say still shows.
"""

from __future__ import annotations

import json
import logging
import re
import warnings

# Warnings every aogpt run printed on every rank that say nothing about it (message, why harmless).
KNOWN_HARMLESS_WARNINGS = (
    ("'set_vital' is deprecated", "torchdata's dataloader calls a deprecated torch API; nothing to act on"),
    (
        "DTensor random operators may not have complete support on cpu",
        "CPU mesh: weights are initialised by init_weights",
    ),
    ("DTensor manual_seed() may not have complete support on cpu", "CPU mesh: seeding still makes runs repeatable"),
    ("returned a view tensor. An in-place op on this view", "FSDP2 notice; aogpt never writes in place into outputs"),
    (
        "Set timeout is now only supported for either nccl or gloo",
        "torchtitan shortens the timeout; gloo keeps its own",
    ),
    ("In CPU autocast, but the target dtype is not supported", "float32 training on CPU needs no autocast"),
    ("CPU Autocast only supports dtypes of", "the same notice, from torch"),
)


def quiet_known_warnings() -> None:
    for message, _why in KNOWN_HARMLESS_WARNINGS:
        warnings.filterwarnings(
            "ignore", message=".*" + message.replace("(", r"\(").replace(")", r"\)"), category=UserWarning
        )


class _KnownNoise(logging.Filter):
    """Drops log lines every run printed that say nothing about it, and makes torchtitan's
    "Building <model> <flavor>with {<a JSON dump>}" one line."""

    def __init__(self, drop: tuple[str, ...]) -> None:
        super().__init__()
        self.drop = drop

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if any(part in msg for part in self.drop):
            return False
        built = re.fullmatch(r"Building (.+?) ?with (\{.*\})", msg, re.DOTALL)
        if built:
            try:
                args = json.loads(built.group(2))
            except ValueError:
                return True
            record.msg = f"Building {built.group(1)}: " + ", ".join(f"{k}={v}" for k, v in args.items())
            record.args = ()
        return True


def quiet_known_noise(accelerator: bool) -> None:
    """torchtitan's version line (it explains its own 0.0.0 fallback), and what importing torchao
    (float8 converters) logs: torch's pytree deprecation of its Enum registration and, on a CPU, the
    absence of its CUDA kernels and of triton (idempotent)."""
    cpu_only = () if accelerator else ("Failed to load", "Detected no triton")
    loggers = {
        "": ("torchtitan version: ",),  # torchtitan logs through the root logger
        "torchao": cpu_only,
        "torchao.kernel.intmm": cpu_only,
        "torch.utils._pytree": ("is an Enum subclass and is now natively supported by torch.compile",),
    }
    for name, drop in loggers.items():
        log = logging.getLogger(name)
        if drop and not any(isinstance(f, _KnownNoise) for f in log.filters):
            log.addFilter(_KnownNoise(drop))


_BOX = re.compile(r"[│╭╮╰╯─]+")


def box_message(text: str) -> str:
    """The first part of tyro's boxed error (both versions parse the command line with tyro), its
    wrapped lines joined (a value is not cut off)."""
    lines = [_BOX.sub(" ", line).strip() for line in text.splitlines() if line.strip()]
    body = []
    for line in lines[1:]:  # lines[0] is the box title, e.g. "Value error"
        if not line:  # a ─── rule ends the first part
            break
        body.append(line)
    return " ".join(body) or (lines[0] if lines else "invalid arguments")
