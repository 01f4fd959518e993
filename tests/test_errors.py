"""errors.py: a full disk is recognised however it arrives, a signal stops in one line, and a target a
command would write over (an existing file, a device, a FIFO) is refused before any work."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import fill_disk

from aogpt_plugin.errors import (
    Interrupted,
    UserError,
    check_writable,
    disk_full_reason,
    interrupted_line,
    interruption,
    kind_of,
    size_text,
)


class _CheckpointException(BaseException):
    """What DCP raises: every rank's failure as (exception, traceback) in `failures`."""

    def __init__(self, failures):
        self.failures = failures
        super().__init__("CheckpointException ranks:dict_keys([0])")


ZIP_WRITER = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        Exception("Error while serializing: I/O error: No space left on device (os error 28)"),  # safetensors
        Exception("No space left on device (os error 28)"),  # tokenizers' save
        _CheckpointException({0: (OSError(errno.ENOSPC, "No space left on device"), [])}),
    ],
)
def test_a_full_disk_is_recognised_in_every_form_it_arrives_in(error):
    assert disk_full_reason(error) in ("No space left on device", "Disk quota exceeded")


def test_the_zip_writers_short_write_counts_only_on_a_filesystem_without_room(small_disk, tmp_path):
    """torch's zip writer loses the errno: `unexpected pos` is a full disk only where there is no room."""
    wrapped = _CheckpointException({0: (ZIP_WRITER, [])})
    assert disk_full_reason(wrapped, str(tmp_path), needed=1000) is None  # room enough: another fault
    disk = small_disk("4m")
    assert disk_full_reason(wrapped, str(disk), needed=1000) is None
    fill_disk(disk, leave=0)
    assert disk_full_reason(wrapped, str(disk / "step-4"), needed=1000) == "No space left on device"
    assert disk_full_reason(RuntimeError("shape mismatch"), str(disk)) is None  # not a write failure


def test_a_signal_wrapped_by_a_library_is_found_and_named():
    stop = Interrupted(signal.SIGTERM)
    assert interruption(_CheckpointException({0: (stop, [])})) is stop
    assert interruption(ValueError("x")) is None
    stop.detail = "'out' was not written"
    assert interrupted_line(stop) == "stopped by SIGTERM; 'out' was not written"
    assert interrupted_line(KeyboardInterrupt()) == "stopped by Ctrl-C (SIGINT)"


def test_check_writable_refuses_devices_fifos_folders_and_an_existing_file_without_force(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for path, says in (
        ("/dev/full", "is a character device, not a file"),
        (str(fifo), "is a FIFO (named pipe), not a file"),
        (str(tmp_path), "is a folder"),
        (str(tmp_path / "no" / "x.json"), "its folder"),
    ):
        with pytest.raises(UserError, match=re.escape(says)):
            check_writable(path, "--save-samples")
    mine = tmp_path / "mine.json"
    mine.write_text("the user's file")
    with pytest.raises(UserError, match=r"--save-samples '.*mine.json' already exists; pass --force to replace it"):
        check_writable(str(mine), "--save-samples")
    check_writable(str(mine), "--save-samples", force=True)
    check_writable(str(tmp_path / "new.json"), "--save-samples")
    assert kind_of(str(mine)) is None and kind_of(str(tmp_path / "absent")) is None


def test_sizes_read_as_df_shows_them():
    assert [size_text(n) for n in (512, 27_019_651, 109_100_000_000)] == ["512 B", "27.0 MB", "109.1 GB"]


@pytest.mark.parametrize(
    "raised, line, status",
    [
        ("ConfigError('training.steps=0 must be >= 1')", "error: training.steps=0 must be >= 1", 2),
        ("Interrupted(signal.SIGTERM)", "stopped by SIGTERM", 143),
        ("KeyboardInterrupt()", "stopped by Ctrl-C (SIGINT)", 130),
        ("NothingToDo('nothing to train: ...')", "nothing to train: ...", 0),
    ],
)
def test_an_entry_we_do_not_own_ends_a_user_error_or_a_stop_in_one_line(raised, line, status):
    """Stock `-m torchtitan.train` (whose main we do not own) ends as our commands do; a signal too (a stop, not
    an `error:`), and a run with nothing to do exits 0 with its line."""
    script = (
        "import signal\n"
        "from aogpt_plugin.errors import ConfigError, Interrupted, NothingToDo, exit_in_one_line_on_user_error\n"
        "exit_in_one_line_on_user_error()\n"
        f"raise {raised}\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == status and proc.stderr.strip() == line, proc.stderr


@pytest.mark.parametrize("installed", [True, False], ids=["our-handler", "default-handler"])
def test_a_forked_worker_ends_quietly_on_sigterm(installed, capfd):
    """lm_eval's pool forks workers from `aogpt lm-eval` and ends them with SIGTERM: a worker that inherited the
    command's handler dies of the signal as with the default one, silently, instead of raising Interrupted
    (one traceback per worker), while the command's own process still gets Interrupted."""
    import multiprocessing
    import time

    from aogpt_plugin.errors import restore_signals, stop_at_once_on_signals

    previous = stop_at_once_on_signals() if installed else {}
    try:
        worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
        worker.start()
        time.sleep(0.5)
        worker.terminate()  # SIGTERM, as a pool's shutdown sends it
        worker.join(10)
        assert worker.exitcode == -signal.SIGTERM
        assert "Traceback" not in capfd.readouterr().err
        if installed:
            with pytest.raises(Interrupted):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
    finally:
        restore_signals(previous)


# a module that gets a SIGTERM while it is being imported (the loop lets the handler run inside it)
SIGNALLED = "import signal\nsignal.raise_signal(signal.SIGTERM)\nfor _ in range(10**5):\n    pass\nfinished = True\n"
SIGNALLED_IMPORTS = {  # module files; the test imports the first
    "plain": {"signalled_plain": SIGNALLED},
    # a library that imports an optional module inside `except BaseException` would swallow the stop
    "guarded": {
        "signalled_guarded": "try:\n    import signalled_inner\nexcept BaseException:\n    pass\nfinished = True\n",
        "signalled_inner": SIGNALLED,
    },
}


@pytest.mark.parametrize("case", sorted(SIGNALLED_IMPORTS))
def test_a_signal_during_an_import_stops_the_command_after_the_import(case, tmp_path, monkeypatch):
    """An exception raised inside an import leaves the module half made (numpy's `linalg` then recursed forever,
    torch's c10d start-up called std::terminate) or is swallowed by a library's `except` (the command ran to its
    end, exit 0). So a stop that comes during an import waits for it, then stops the command: the module is whole
    and the command still gets Interrupted."""
    import importlib
    import time

    from aogpt_plugin.errors import restore_signals, stop_at_once_on_signals

    for name, body in SIGNALLED_IMPORTS[case].items():
        (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = None
    previous = stop_at_once_on_signals()
    try:
        with pytest.raises(Interrupted) as info:
            module = importlib.import_module(min(SIGNALLED_IMPORTS[case]))
            time.sleep(5)
    finally:
        restore_signals(previous)
        for name in SIGNALLED_IMPORTS[case]:
            sys.modules.pop(name, None)
    assert module is not None and module.finished and info.value.signum == signal.SIGTERM


def test_the_same_signal_twice_during_an_import_stops_the_command_once(tmp_path, monkeypatch):
    """Like the kernel's pending signals, a second SIGTERM that comes while the first waits for an import is merged
    into it: the command is stopped once, and its clean-up after that is not interrupted a second time."""
    import importlib
    import time

    from aogpt_plugin.errors import restore_signals, stop_at_once_on_signals

    (tmp_path / "signalled_twice.py").write_text(
        SIGNALLED.replace("signal.raise_signal(signal.SIGTERM)\n", "signal.raise_signal(signal.SIGTERM)\n" * 2)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = stop_at_once_on_signals()
    stops = 0
    try:
        try:
            importlib.import_module("signalled_twice")
            time.sleep(5)
        except Interrupted:
            stops += 1
        try:  # the clean-up: 0.5 s, many times the resend's delay
            time.sleep(0.5)
        except Interrupted:
            stops += 1
    finally:
        restore_signals(previous)
        sys.modules.pop("signalled_twice", None)
    assert stops == 1


def test_a_command_run_inside_an_import_still_stops_at_once(tmp_path):
    """Only imports the command started are waited for: a command run from a module being imported (a script
    imported by another) stops at once, not never."""
    script = (
        "import signal, time\n"
        "from aogpt_plugin.errors import Interrupted, restore_signals, stop_at_once_on_signals\n"
        "previous = stop_at_once_on_signals()\n"
        "try:\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "    print('not stopped')\n"
        "except Interrupted:\n"
        "    print('stopped')\n"
        "restore_signals(previous)\n"
    )
    (tmp_path / "imported_command.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", "import imported_command"], capture_output=True, text=True, env=env, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr


def _exit_0_if_both_signals_take_their_default_action():
    sys.exit(0 if all(signal.getsignal(s) == signal.SIG_DFL for s in (signal.SIGINT, signal.SIGTERM)) else 1)


def test_a_forked_child_starts_with_the_default_signal_actions():
    """A forked worker must not run a Python handler for the pool's SIGTERM: one that lands just before the
    worker blocks on its queue's lock is never handled, and the pool's shutdown waits for it forever (how
    `aogpt lm-eval` hung in lm_eval's bootstrap). So the child has the default actions from the fork on,
    while the command keeps its own handlers."""
    import multiprocessing

    from aogpt_plugin.errors import restore_signals, stop_at_once_on_signals

    previous = stop_at_once_on_signals()
    try:
        child = multiprocessing.get_context("fork").Process(target=_exit_0_if_both_signals_take_their_default_action)
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert getattr(signal.getsignal(signal.SIGTERM), "stops_the_command", False)
    finally:
        restore_signals(previous)


def test_check_types_names_the_first_wrong_type_as_the_caller_spells_it():
    import torch

    from aogpt_plugin.errors import check_types, flag_name, is_int

    rules = {"steps": (is_int, "an integer"), "order": (lambda v: isinstance(v, str), "random or l2r")}
    check_types({"steps": 4, "order": "l2r"}, rules)  # right types: nothing raised
    with pytest.raises(UserError, match=r"^steps True is a bool; allowed: an integer$") as info:
        check_types({"steps": True, "order": 1}, rules)  # a bool is no count; the first bad one is named
    assert info.value.field == "steps"
    with pytest.raises(UserError, match=r"^--order tensor of shape \(2, 3\) is a Tensor; allowed: random or l2r$"):
        check_types({"steps": 4, "order": torch.zeros(2, 3)}, rules, flag_name)
    with pytest.raises(UserError, match=r"^steps 4.0 is a float; allowed: an integer$"):
        check_types({"steps": 4.0, "order": "l2r"}, rules)
