"""A stop that saves: SIGTERM (what SLURM sends before preemption) or a first Ctrl-C asks training to
finish the step it is in, write a complete checkpoint and exit; a second Ctrl-C stops at once.

The signal only sets a flag. The step guard (step_guard.py) all-reduces it with its own flags before
every optimizer step, so every rank agrees on the step to stop after; the checkpoint save wrap
(titan022/checkpoint_save.py) then saves that step and raises StopRequested, which the launcher turns into
one line naming the checkpoint and the command that resumes it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


class StopRequested(Exception):
    """Training stopped on request after `step`, whose checkpoint is complete."""

    def __init__(self, step: int, signum: int, step_dir: str):
        self.step, self.signum, self.step_dir = step, signum, step_dir
        super().__init__(f"stopped by {SIGNAL_NAMES.get(signum, signum)} after step {step}")


class Interrupted(KeyboardInterrupt):
    """Stopped at once: a second Ctrl-C, or a signal before training started (nothing to save yet)."""

    def __init__(self, signum: int = signal.SIGINT):
        self.signum = signum
        super().__init__(SIGNAL_NAMES.get(signum, str(signum)))


def stop_at_once_until_training() -> None:
    """Before the optimizers exist there is no step to finish: SIGTERM and Ctrl-C stop at once, with
    the launcher's one line instead of a traceback (or, for SIGTERM, no word at all)."""

    def handle(signum, frame):
        raise Interrupted(signum)

    if threading.current_thread() is threading.main_thread():
        for signum in SIGNAL_NAMES:
            signal.signal(signum, handle)


class StopRequest:
    """The flag the signal handlers set (main thread only; a no-op elsewhere)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNAL_NAMES:
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            if signum == signal.SIGINT:  # the second Ctrl-C: stop now, the last complete checkpoint stays
                raise Interrupted(signum)
            return  # e.g. torchrun's SIGTERM after the terminal's SIGINT: already stopping
        self.signum = signum
        if os.environ.get("RANK", "0") != "0":  # every rank gets the signal; rank 0 speaks
            return
        sys.stderr.write(
            f"{SIGNAL_NAMES[signum]}: finishing this step and saving a checkpoint before stopping "
            "(Ctrl-C again stops at once)\n"
        )
        sys.stderr.flush()

    @property
    def requested(self) -> bool:
        return self.signum is not None
