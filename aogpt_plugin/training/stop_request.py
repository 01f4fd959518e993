"""A stop that saves: SIGTERM (what SLURM sends before preemption) or a first Ctrl-C asks training to
finish the step it is in, write a complete checkpoint and exit; a second Ctrl-C stops at once.

The signal only sets a flag. The step guard (step_guard.py) all-reduces it with its own flags before
every optimizer step, on the device, and every rank takes the stop at the guard's next read (a logging
step or a save; a single process after the step it is in), so all agree on the step to stop after; the
checkpoint save (checkpointing.py) then saves that step and raises StopRequested, which the launcher
turns into one line, a stop and not an error, naming the checkpoint and the command that resumes it. With checkpointing off the same
stop comes after the step with nothing saved. Before the optimizers exist (start-up), SIGTERM and
Ctrl-C stop at once (errors.stop_at_once_on_signals, installed first thing by the launcher).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from ..errors import SIGNAL_NAMES, imports_on_stack, interrupt_unless_importing

__all__ = ["StopRequest", "StopRequested"]


class StopRequested(Exception):
    """Training stopped on request after `step`; `step_dir` is its complete checkpoint, or None when
    checkpointing is off (nothing was saved)."""

    def __init__(self, step: int, signum: int, step_dir: str | None):
        self.step, self.signum, self.step_dir = step, signum, step_dir
        super().__init__(f"stopped by {SIGNAL_NAMES.get(signum, signum)} after step {step}")


class StopRequest:
    """The flag the signal handlers set (main thread only; a no-op elsewhere). `saves` is whether a
    checkpoint will be written at the stop (set by the checkpoint save at every step; None before
    the first)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.saves: bool | None = None
        # the second Ctrl-C, noted where it is taken: raised inside DCP's writer it may surface as an
        # unrelated error ("unexpected pos ...") that no longer carries it (checkpointing.py reads this)
        self.stopped_at_once: int | None = None
        self._imports_below = 0  # importlib's frames under install(): an import it runs in is not waited for

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._imports_below = imports_on_stack(sys._getframe())
        for signum in SIGNAL_NAMES:
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            if signum == signal.SIGINT:  # the second Ctrl-C: stop now, the last complete checkpoint stays
                self.stopped_at_once = signum
                interrupt_unless_importing(signum, frame, self._imports_below)
            return  # anything else (torchrun's SIGTERM after the terminal's SIGINT): already stopping
        self.signum = signum
        if os.environ.get("RANK", "0") != "0":  # every rank gets the signal; rank 0 speaks
            return
        then = {
            True: " and saving a checkpoint before stopping",
            False: ", then stopping; checkpointing is off (checkpoint.enable=false), so nothing will be saved",
            None: " before stopping",
        }[self.saves]
        sys.stderr.write(f"{SIGNAL_NAMES[signum]}: finishing this step{then} (Ctrl-C again stops at once)\n")
        sys.stderr.flush()

    @property
    def requested(self) -> bool:
        return self.signum is not None
