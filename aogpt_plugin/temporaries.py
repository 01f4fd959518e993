"""Temporary siblings for atomic writes (a model folder, a prepared data folder, a tokenizer.json, a
samples file): made with the writer's pid and host in their name, so the next writer on that host can
remove those a killed writer left behind (on a shared filesystem another node's pids mean nothing
here), and renamed into place only once complete. And the writer lock of an output (a model folder, a
results file): one process writes it at a time."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import tempfile

from .errors import DiskFullError, UserError, disk_full_reason, signals_deferred, space_note


def make_temporary(parent: str, prefix: str) -> str:
    """A fresh temporary folder in `parent` named `<prefix><pid>-...`, after removing stale ones."""
    remove_stale_temporaries(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{_owner()}-", dir=parent)


def remove_stale_temporaries(parent: str, prefix: str) -> None:
    """Temporaries of a writer that was killed (its pid is gone) are removed by the next writer."""
    for name in os.listdir(parent):
        if not name.startswith(prefix):
            continue
        pid, _, host = name[len(prefix) :].split("-", 1)[0].partition("@")
        if pid.isdigit() and host in ("", _host()) and not alive(int(pid)):  # no host: an older aogpt's name
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
    replaceable by the caller; an empty one is simply replaced). Ctrl-C and SIGTERM wait until the
    swap is done (between the renames the old folder exists only under a temporary name that the
    next writer would remove), then stop the command with `out_dir` written; a failed second rename
    puts the old folder back."""
    with signals_deferred(f"{out_dir!r} was written"):
        if not (os.path.isdir(out_dir) and os.listdir(out_dir)):  # absent, or an empty folder (rename replaces it)
            os.rename(tmp, out_dir)
            return
        old = tmp + ".old"
        os.rename(out_dir, old)
        try:
            os.rename(tmp, out_dir)
        except BaseException:
            os.rename(old, out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)


def write_file(path: str, data: bytes, what: str) -> None:
    """`data` into `path` through a temporary sibling (`.NAME.aogpt-PID@HOST-...`) renamed into place: a
    failure, a full disk or a signal leaves the old file (or none), never part of one. A full disk
    is a DiskFullError naming `what` (e.g. "OUT 'tok.json'") and the bytes needed."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}.aogpt-"
    remove_stale_temporaries(folder, prefix)
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{_owner()}-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, _file_mode(path))
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


def _file_mode(path: str) -> int:
    """The mode a replaced file keeps, or what a plain open() would give a new one (0666 less the umask;
    mkstemp's temporaries are 0600)."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _host() -> str:
    """This host's name as a temporary's name holds it (no dashes: they end the owner part)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())


def _owner() -> str:
    return f"{os.getpid()}@{_host()}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_held_locks: dict[str, tuple[int, str]] = {}  # abs path of an output -> (fd, its lock file)


def lock_path(target: str) -> str:
    """The lock file of output `target`: `.NAME.aogpt-lock` beside it."""
    parent, name = os.path.split(os.path.abspath(target))
    return os.path.join(parent, f".{name}.aogpt-lock")


def acquire_writer_lock(target: str, what: str, advice: str) -> None:
    """Take output `target`'s writer lock (an fcntl lock on `lock_path(target)`, holding the writer's pid;
    re-entrant in this process), or one UserError: `<what> is being written by another aogpt process (pid N);
    <advice>`. The kernel drops the lock of a process that dies, so a killed writer's lock is taken over."""
    import fcntl

    key = os.path.abspath(target)
    if key in _held_locks:
        return
    path = lock_path(target)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(f"{what} is being written by another aogpt process (pid {holder}); {advice}") from None
        try:  # a releasing holder unlinks the file: lock the file that is still there
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    if not _held_locks:
        atexit.register(_release_all_locks)
    _held_locks[key] = (fd, path)


def release_writer_lock(target: str) -> None:
    held = _held_locks.pop(os.path.abspath(target), None)
    if held is None:
        return
    fd, path = held
    try:
        os.unlink(path)  # while still locked, so no one else holds this file
    except FileNotFoundError:
        pass
    os.close(fd)


def _release_all_locks() -> None:
    for key in list(_held_locks):
        release_writer_lock(key)
