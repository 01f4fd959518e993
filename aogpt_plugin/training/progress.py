"""A line at least every ~10 s of a long wait, whatever `metrics.log_freq` is: training (`step 40/100: 0.61
steps/s, 1 min 38 s left`) and each validation (its batches, raw and EMA weights).

Timed on the host only: a clock read at the boundaries the loop already has (an optimizer step's end, a
validation batch's end), nothing read from the device, so no step waits for the host (the step guard's rule,
step_guard.py). The rate is the average since the loop began in this process (validations and saves
included: what is left takes as long); the host cannot run ahead of the device by more than a few steps, so
over seconds its rate is the device's. Rank 0 only.

`AOGPT_PROGRESS_SECONDS` sets the interval (default 10; 0: a line at every boundary, as the tests use).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from ..errors import ConfigError

PROGRESS_SECONDS_ENV = "AOGPT_PROGRESS_SECONDS"
PROGRESS_SECONDS = 10.0


def progress_seconds(env: dict[str, str] | None = None) -> float:
    """The interval between progress lines: $AOGPT_PROGRESS_SECONDS, else 10 s (checked by the preflight)."""
    given = (os.environ if env is None else env).get(PROGRESS_SECONDS_ENV, "")
    if not given:
        return PROGRESS_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(
            f"{PROGRESS_SECONDS_ENV}={given!r} is not allowed; allowed: seconds between progress lines, >= 0 "
            f"(unset: {PROGRESS_SECONDS:g})"
        )
    return seconds


def duration(seconds: float) -> str:
    """`12 s`, `1 min 38 s`, `2 h 05 min`."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """Where a loop of `total` units is (`what` 7/40: rate, time left), said at the first boundary at least
    `every` seconds after the previous line (or the start). `done`: units done before this process began
    (a resumed run's steps)."""

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        done: int = 0,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        every: float | None = None,
    ):
        self.what, self.total, self.unit = what, total, unit
        self.log = log or logging.getLogger().info  # torchtitan logs through the root logger
        self.clock = clock
        self.every = progress_seconds() if every is None else every
        self.speaks = os.environ.get("RANK", "0") == "0"
        self.start, self.start_done = clock(), done
        self.last = self.start

    def update(self, done: int) -> None:
        """`done` units are done; a line when `every` seconds have passed since the previous one."""
        if not self.speaks:
            return
        now = self.clock()
        if now - self.last < self.every or done <= self.start_done:
            return
        rate = (done - self.start_done) / max(now - self.start, 1e-9)  # since the start: what is left takes as long
        left = "" if done >= self.total else f", {duration((self.total - done) / rate)} left"
        self.log(f"{self.what} {done}/{self.total}: {rate:.3g} {self.unit}/s{left}")
        self.last = now
