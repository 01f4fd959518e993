"""Temporary siblings for atomic writes (a model folder, a prepared data folder, a tokenizer.json, a
samples file): made with the writer's pid in their name, so the next writer can remove those a killed
writer left behind, and renamed into place only once complete."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

from .errors import DiskFullError, disk_full_reason, space_note


def make_temporary(parent: str, prefix: str) -> str:
    """A fresh temporary folder in `parent` named `<prefix><pid>-...`, after removing stale ones."""
    remove_stale_temporaries(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)


def remove_stale_temporaries(parent: str, prefix: str) -> None:
    """Temporaries of a writer that was killed (its pid is gone) are removed by the next writer."""
    for name in os.listdir(parent):
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            path = os.path.join(parent, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def move_into_place(tmp: str, out_dir: str) -> None:
    """Rename the finished `tmp` folder to `out_dir`, replacing an existing `out_dir` (checked
    replaceable by the caller; an empty one is simply replaced). Ctrl-C and SIGTERM wait until both
    renames are done: between them the old folder exists only under a temporary name that the next
    writer would remove."""
    deferred = {signal.SIGINT, signal.SIGTERM}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        if os.path.isdir(out_dir) and os.listdir(out_dir):
            old = tmp + ".old"
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
        else:  # absent, or an empty folder (rename replaces it)
            old = None
            os.rename(tmp, out_dir)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_file(path: str, data: bytes, what: str) -> None:
    """`data` into `path` through a temporary sibling (`.NAME.aogpt-PID-...`) renamed into place: a
    failure, a full disk or a signal leaves the old file (or none), never part of one. A full disk
    is a DiskFullError naming `what` (e.g. "OUT 'tok.json'") and the bytes needed."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}.aogpt-"
    remove_stale_temporaries(folder, prefix)
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        reason = disk_full_reason(e, folder, len(data)) if isinstance(e, Exception) else None
        if reason is None:
            raise
        raise DiskFullError(
            f"the disk is full: writing {what} failed ({reason}); {space_note(folder, len(data))}; nothing was written"
        ) from None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
