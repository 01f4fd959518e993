"""torchtitan 0.2.2's Trainer as the launcher runs it: `torchtitan.train.main(Trainer)`, with the log
lines every run printed that say nothing about it dropped (../console.py), and ranks other than 0 at
warnings."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..console import quiet_known_noise
from ..cpu import has_accelerator


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
