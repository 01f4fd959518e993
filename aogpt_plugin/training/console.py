"""What a run prints, made readable on both torchtitan versions: the log lines and warnings every run
printed that say nothing about it are dropped, and tyro's boxed usage error becomes one line.

Everything is matched by message, so anything else these loggers say still shows.
"""

from __future__ import annotations

import json
import logging
import re
import warnings

from ..library_noise import quiet_library_noise

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


class _TorchtitanNoise(logging.Filter):
    """Drops torchtitan's version line (it explains its own 0.0.0 fallback), and makes its "Building <model>
    <flavor>with {<a JSON dump>}" one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if "torchtitan version: " in msg:
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
    """torchtitan's own noise (it logs through the root logger), and what importing torchao (float8
    converters) logs (../library_noise.py) (idempotent)."""
    quiet_library_noise(accelerator)
    root = logging.getLogger()
    if not any(isinstance(f, _TorchtitanNoise) for f in root.filters):
        root.addFilter(_TorchtitanNoise())


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
