"""Errors meant for the user: one line that names the bad value and what is allowed.

CLIs print `error: <message>` and exit with status 2 for these, without a traceback. Faults of the
environment are named the same way: a full disk (DiskFullError, recognised however it arrives) and
a stop by Ctrl-C or SIGTERM (Interrupted, exit status 128 + the signal).
"""

import contextlib
import errno
import os
import signal
import stat
import sys
import threading


class UserError(Exception):
    """Bad input (argument, file, checkpoint, data) detected before expensive work. `field`: the option
    or request field it is about, where the check knows it (a requests file names it with the line)."""

    def __init__(self, message: str = "", field: str | None = None):
        super().__init__(message)
        self.field = field


class ConfigError(UserError):
    """A bad configuration value (TOML key, CLI override, model argument)."""


class InputError(UserError, ValueError):
    """A bad value passed to the Python API (`aogpt_plugin.load` and the model it returns): a UserError
    with the same one-line message, and a ValueError, so Python code catches it as it expects."""


class NothingToDo(Exception):
    """A command that finds its work already done (a training run whose checkpoint is at or past its last
    step): not an error. Its message is the one line to print (no `error:`), and the status is 0."""


def flag_name(option: str) -> str:
    """How a command spells an option in its messages: max_chunks -> --max-chunks. The Python API spells it
    as its keyword (the option's own name): one wording, each caller its own spelling."""
    return "--" + option.replace("_", "-")


def keyword_name(option: str) -> str:
    """How the Python API spells an option in its messages: its keyword."""
    return option


def is_int(value) -> bool:
    """An integer, and not a bool (True is an int to Python, never a count or a seed to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_types(values: dict, rules: dict, spell=keyword_name) -> None:
    """Each value's type, before its value is looked at: `rules` maps a name to (check, what it takes); the
    first value that fails is one UserError naming it as `spell` writes it, the value, its type and what is
    allowed (`length '8' is a str; allowed: an integer`), so a wrong type never surfaces as a TypeError
    from deep inside."""
    for name, (check, allowed) in rules.items():
        value = values[name]
        if not check(value):
            kind = type(value).__name__
            if kind == "Tensor":
                shown = f"tensor of shape {tuple(value.shape)}"
            else:
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            article = "an" if kind[0] in "aeiou" else "a"
            raise UserError(f"{spell(name)} {shown} is {article} {kind}; allowed: {allowed}", name)


def require_at_least(flag: str, value: int | None, low: int, meaning: str) -> None:
    """A numeric CLI argument below its floor is a UserError naming the flag, e.g. `--orders 0`."""
    if value is not None and value < low:
        raise UserError(f"{flag} {value}: {meaning} must be >= {low}")


def check_writable(path: str, flag: str, force: bool = False) -> None:
    """A file the command will write at the end can be written, checked before any work is done: not
    a folder, device or FIFO, its folder exists and is writable, and an existing file only with `force`."""
    folder = os.path.dirname(os.path.abspath(path))
    special = kind_of(path)
    if special:
        raise UserError(f"{flag} {path!r} is {special}, not a file; give a file path")
    if os.path.isdir(path):
        raise UserError(f"{flag} {path!r} is a folder; give a file path")
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {path!r} cannot be written: its folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UserError(f"{flag} {path!r} cannot be written (permission denied)")
    if os.path.exists(path) and not force:
        raise UserError(f"{flag} {path!r} already exists; pass --force to replace it")


def exit_in_one_line_on_user_error() -> None:
    """For entry points we do not own (stock `-m torchtitan.train`, which runs our config function,
    tyro's parse of our sections and our Trainer inside its own main): a UserError nobody caught ends
    as `error: <message>` on rank 0's stderr and exit status 2, NothingToDo as its line and status 0, and a
    stop by Ctrl-C or SIGTERM as its one line and 128 + the signal, as our own commands end, not as one
    traceback per rank. Other exceptions keep the hook that was there."""
    previous = sys.excepthook
    if getattr(previous, "aogpt_user_errors", False):
        return

    def hook(kind, value, tb):
        if issubclass(kind, UserError):
            line, status = f"error: {value}", 2  # after an uncaught exception Python would give 1
        elif issubclass(kind, NothingToDo):
            line, status = str(value), 0
        elif issubclass(kind, KeyboardInterrupt):
            line, status = interrupted_line(value), exit_status(value)  # a stop, not an error
        else:
            return previous(kind, value, tb)
        if os.environ.get("RANK", "0") == "0":  # the real stderr: torch.distributed's hook wraps ours in a buffer
            print(line, file=sys.__stderr__, flush=True)
        sys.stdout.flush()
        os._exit(status)

    hook.aogpt_user_errors = True
    sys.excepthook = hook


# ---- signals: Ctrl-C and SIGTERM stop a command in one line ---------------------------------------
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


class Interrupted(KeyboardInterrupt):
    """Stopped at once by SIGINT or SIGTERM. Exit status 128 + `signum`; `detail` (set by a writer
    that cleaned up) says what became of its output."""

    def __init__(self, signum: int = signal.SIGINT, detail: str | None = None):
        self.signum, self.detail = signum, detail
        super().__init__(SIGNAL_NAMES.get(signum, str(signum)))


def stop_at_once_on_signals() -> dict:
    """SIGTERM (a scheduler's stop) and Ctrl-C raise Interrupted in the main thread (once an import
    under way there is over: `interrupt_unless_importing`), so writers' `except BaseException`
    clean-ups run and the command ends in one line, not a traceback (Ctrl-C) or a silent death that
    leaves temporaries behind (SIGTERM's default). Returns the handlers it replaced
    (`restore_signals` puts them back); a no-op outside the main thread.

    A process forked from this one (lm_eval's pool workers) does not run the command: there both
    signals take their default action from the fork on (`_default_signals_in_child`), so a pool's
    normal shutdown (SIGTERM to each worker) ends every worker at once and quietly. A Python handler
    in a worker would race: a SIGTERM that lands just before the worker blocks on its task queue's
    lock runs no handler, and the pool waits for that worker forever (`aogpt lm-eval` hung so, now
    and then)."""

    def handle(signum, frame):
        interrupt_unless_importing(signum, frame, imports_below)

    handle.stops_the_command = True
    if threading.current_thread() is not threading.main_thread():
        return {}
    imports_below = imports_on_stack(sys._getframe())
    return {signum: signal.signal(signum, handle) for signum in SIGNAL_NAMES}


RESEND_SECONDS = 0.02  # how soon a signal that came during an import is sent again
_resending: set[int] = set()  # signals with a resend pending: a second one is merged into it, as the kernel does


def interrupt_unless_importing(signum: int, frame, imports_below: int) -> None:
    """Raise Interrupted(signum) where the main thread is (`frame`), unless it is inside an import the
    command started (more import frames than `imports_below`, those under the handler's installer).
    There an exception leaves a module half made, and the stop turns into something else: numpy's
    `linalg` recursing forever, a class without its fields, torch's c10d start-up calling
    std::terminate (exit -6), or a library's `except` around an optional import swallowing it so that
    the command runs to its end. Then the signal is sent again a moment later, to whichever handler
    is installed by then, until that import is over. The same signal coming again meanwhile is merged
    into the pending one, so two Ctrl-Cs during an import stop the command once, not a second time
    inside its clean-up."""
    if imports_on_stack(frame) > imports_below:
        if signum not in _resending:
            _resending.add(signum)
            resend = threading.Timer(RESEND_SECONDS, _resend, (signum,))
            resend.daemon = True  # a command that ends first is not kept waiting for it
            resend.start()
        return
    raise Interrupted(signum)


def _resend(signum: int) -> None:
    _resending.discard(signum)  # first: the signal may land inside the import again and need a new resend
    os.kill(os.getpid(), signum)


def imports_on_stack(frame) -> int:
    """How many of importlib's frames are at or under `frame`: more than an installer saw means an import
    is under way."""
    count = 0
    while frame is not None:
        count += frame.f_code.co_filename.startswith("<frozen importlib")
        frame = frame.f_back
    return count


def _default_signals_in_child() -> None:
    """In a process just forked: the command's stop handlers give way to the default actions."""
    for signum in SIGNAL_NAMES:
        if getattr(signal.getsignal(signum), "stops_the_command", False):
            signal.signal(signum, signal.SIG_DFL)


os.register_at_fork(after_in_child=_default_signals_in_child)  # acts only where our handlers are installed


def stop_quietly_on_signals(line_out: bool) -> None:
    """The command's work is over and its result (or its one error line) is out: from here to the end of the
    process a Ctrl-C or SIGTERM raises nothing into the clean-up code still running (an exception there is a
    traceback after the command's last line); it ends the process at once, with 128 + the signal and, unless
    a line is out already (`line_out`), the stop's one line. A no-op outside the main thread."""

    def handle(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if not line_out:
            with contextlib.suppress(Exception):
                os.write(2, f"{interrupted_line(Interrupted(signum))}\n".encode())
        os._exit(128 + signum)

    handle.stops_the_command = True
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNAL_NAMES:
            signal.signal(signum, handle)


def restore_signals(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def signals_deferred(detail: str):
    """Ctrl-C and SIGTERM wait until the block is done, then stop the command (Interrupted with
    `detail`, what the block did). Python handlers, not a blocked signal mask: a signal may reach any
    of torch's threads, and Python runs every handler in the main thread. A no-op outside it."""
    caught: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, lambda s, frame: caught.append(s)) for signum in SIGNAL_NAMES}
    try:
        yield
    finally:
        restore_signals(previous)
    if caught:
        raise Interrupted(caught[0], detail)


def interrupted_line(error: KeyboardInterrupt, how: str = "stopped") -> str:
    """`stopped by Ctrl-C (SIGINT); <what the writer left>`: a command's one line after a signal."""
    name = SIGNAL_NAMES.get(getattr(error, "signum", signal.SIGINT), "a signal")
    detail = getattr(error, "detail", None)
    return f"{how} by {name}" + (f"; {detail}" if detail else "")


def interruption(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C / SIGTERM inside `error`, when a library wrapped it (DCP turns every rank's
    exception, KeyboardInterrupt included, into a CheckpointException), else None."""
    return next((e for e in _causes(error) if isinstance(e, KeyboardInterrupt)), None)


def exit_status(error: KeyboardInterrupt) -> int:
    return 128 + getattr(error, "signum", signal.SIGINT)


# ---- a full disk: recognised as it really arrives, named in one line -------------------------------
class DiskFullError(UserError):
    """A write ran out of disk space (or of the user's quota)."""


_FULL_ERRNOS = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded"}
# torch's zip writer (torch.save, DCP's data files) loses the write's errno: after a failed write it
# reports `[enforce fail at inline_container.cc:...] unexpected pos 704 vs 598` or `file write failed`
_SHORT_WRITE = ("unexpected pos", "file write failed")
LOW_SPACE = 64 << 20  # without a size to compare with, a filesystem this close to full is full


def _causes(error: BaseException):
    """`error`, its causes and contexts, and each rank's failure inside DCP's CheckpointException."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]
        failures = getattr(e, "failures", None)  # DCP's CheckpointException: rank -> (exception, traceback)
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()]


def disk_full_reason(error: BaseException, folder: str | None = None, needed: int | None = None) -> str | None:
    """'No space left on device' (or 'Disk quota exceeded') when `error` is a write that ran out of
    space, else None. ENOSPC/EDQUOT are recognised anywhere in the chain, also as text (safetensors'
    and tokenizers' Rust errors carry `os error 28`); a short write whose errno was lost (torch's zip
    writer) counts when `folder`'s filesystem has less than `needed` bytes free (LOW_SPACE without it)."""
    short = False
    for e in _causes(error):
        code = getattr(e, "errno", None)
        if code in _FULL_ERRNOS:
            return _FULL_ERRNOS[code]
        text = str(e)
        for reason in _FULL_ERRNOS.values():
            if reason in text:
                return reason
        if f"os error {errno.ENOSPC})" in text:
            return _FULL_ERRNOS[errno.ENOSPC]
        short = short or any(s in text for s in _SHORT_WRITE)
    if short and folder is not None and free_bytes(folder) < (needed or LOW_SPACE):
        return _FULL_ERRNOS[errno.ENOSPC]
    return None


def free_bytes(path: str) -> int:
    """Bytes free on the filesystem holding `path` (or its nearest existing parent), as `df` shows them."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize


def folder_bytes(path: str) -> int:
    """Bytes of the files under `path` (0 if it is gone)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def size_text(n: int) -> str:
    """Bytes for a person: 512 B, 3.4 MB, 109.1 GB (decimal units, as df -H and the docs use)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def space_note(folder: str, needed: int | None, needs: str = "it needs") -> str:
    """'it needs 109.1 MB and 51.2 MB are free there' (only the free space when the need is unknown)."""
    free = size_text(free_bytes(folder))
    return f"{needs} {size_text(needed)} and {free} are free there" if needed else f"{free} are free there"


# ---- what a command refuses to write over ---------------------------------------------------------
def kind_of(path: str) -> str | None:
    """'a character device', 'a FIFO', ... for an existing path that is neither a regular file nor a
    folder (writing one would block, vanish or fail after the work), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, name in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None
