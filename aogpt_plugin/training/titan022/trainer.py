"""torchtitan 0.2.2's Trainer as the launcher runs it: `torchtitan.train.main(Trainer)`, with the log
lines every run printed that say nothing about it dropped, and ranks other than 0 at warnings."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable

from .cpu import has_accelerator


class _KnownNoise(logging.Filter):
    """Drops log lines every run printed that say nothing about it, and makes torchtitan's
    "Building <model> <flavor>with {<a JSON dump>}" one line. Matched by message, so anything
    else these loggers say still shows."""

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


def _quiet_other_ranks(titan, rank: int) -> None:
    """torchtitan logs every line on every rank; keep rank 0's (others: warnings) unless asked.
    Every rank drops the known noise (quiet_known_noise)."""
    quiet_known_noise(has_accelerator())
    if rank == 0 or os.environ.get("AOGPT_LOG_ALL_RANKS") == "1":
        return
    init_logger = titan.init_logger

    def init_quiet_logger():
        init_logger()
        logging.getLogger().setLevel(logging.WARNING)

    titan.init_logger = init_quiet_logger


def trainer_for(rank: int) -> Callable[[], None]:
    """`torchtitan.train`'s own main, imported and with the logs quieted; it parses sys.argv itself."""
    import torchtitan.train as titan

    _quiet_other_ranks(titan, rank)
    return lambda: titan.main(titan.Trainer)
