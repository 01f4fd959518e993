"""temporaries.py: a file is written whole or not at all (a full disk, a signal), and a killed writer's
temporary is removed by the next one."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import fill_disk

from aogpt_plugin.errors import DiskFullError, Interrupted
from aogpt_plugin.temporaries import move_into_place, write_file


def test_write_file_replaces_atomically_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "tok.json"
    target.write_text("old")
    write_file(str(target), b"new", f"OUT {str(target)!r}")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["tok.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_a_full_disk_keeps_the_old_file_names_the_bytes_needed_and_leaves_nothing(small_disk):
    disk = small_disk("1m")
    target = disk / "tok.json"
    target.write_text("old")
    fill_disk(disk, leave=4096)
    with pytest.raises(DiskFullError) as e:
        write_file(str(target), b"x" * 200_000, f"OUT {str(target)!r}")
    message = str(e.value)
    assert message.startswith(f"the disk is full: writing OUT {str(target)!r} failed (No space left on device)")
    assert "it needs 200.0 kB and " in message and message.endswith("nothing was written")
    assert target.read_text() == "old" and sorted(os.listdir(disk)) == ["filler", "tok.json"]


def test_a_signal_while_writing_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "s.json"
    target.write_text("old")

    def interrupted_chmod(path, mode):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(os, "chmod", interrupted_chmod)
    with pytest.raises(Interrupted):
        write_file(str(target), b"new", "FILE")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["s.json"]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_writer(tmp_path):
    stale = tmp_path / ".tok.json.aogpt-999999999-abc"
    stale.write_text("partial")
    write_file(str(tmp_path / "tok.json"), b"{}", "OUT")
    assert sorted(os.listdir(tmp_path)) == ["tok.json"]


def test_move_into_place_replaces_a_folder_whole(tmp_path):
    old, new = tmp_path / "out", tmp_path / ".tmp-1"
    old.mkdir()
    (old / "a").write_text("old")
    new.mkdir()
    (new / "a").write_text("new")
    move_into_place(str(new), str(old))
    assert (old / "a").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["out"]
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # Ctrl-C and SIGTERM delivered again


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_swap_waits_for_it_and_says_the_folder_was_written(tmp_path, monkeypatch, signum):
    """Ctrl-C or SIGTERM between the two renames (when the old folder exists only under a temporary
    name) lets the swap and the old folder's removal finish, then stops with `out` written."""
    from aogpt_plugin.errors import restore_signals, stop_at_once_on_signals

    old, new = tmp_path / "out", tmp_path / ".tmp-1"
    for folder, text in ((old, "old"), (new, "new")):
        folder.mkdir()
        (folder / "a").write_text(text)
    rename = os.rename

    def rename_then_signal(src, dst):
        rename(src, dst)
        if dst.endswith(".old"):
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(os, "rename", rename_then_signal)
    previous = stop_at_once_on_signals()
    try:
        with pytest.raises(Interrupted) as stopped:
            move_into_place(str(new), str(old))
    finally:
        restore_signals(previous)
    assert stopped.value.signum == signum and stopped.value.detail == f"{str(old)!r} was written"
    assert (old / "a").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failed_second_rename_puts_the_old_folder_back(tmp_path, monkeypatch):
    old, new = tmp_path / "out", tmp_path / ".tmp-1"
    for folder, text in ((old, "old"), (new, "new")):
        folder.mkdir()
        (folder / "a").write_text(text)
    rename = os.rename

    def second_fails(src, dst):
        if src == str(new):
            raise OSError(28, "No space left on device")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(OSError):
        move_into_place(str(new), str(old))
    assert (old / "a").read_text() == "old" and not (tmp_path / ".tmp-1.old").exists()


def test_a_written_file_gets_the_mode_open_would_give_it(tmp_path):
    previous = os.umask(0o077)
    try:
        write_file(str(tmp_path / "private.json"), b"{}", "OUT")
    finally:
        os.umask(previous)
    assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600
    (tmp_path / "shared.json").write_bytes(b"")
    os.chmod(tmp_path / "shared.json", 0o664)
    write_file(str(tmp_path / "shared.json"), b"{}", "OUT")
    assert (tmp_path / "shared.json").stat().st_mode & 0o777 == 0o664


def test_only_this_hosts_dead_writers_temporaries_are_removed(tmp_path):
    """On a shared filesystem another node's pid means nothing here: its temporary is left alone."""
    import re
    import socket

    from aogpt_plugin.temporaries import make_temporary

    here = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())
    dead_here, elsewhere = tmp_path / f".aogpt-x-999999999@{here}-abc", tmp_path / ".aogpt-x-999999999@node_b-abc"
    dead_here.mkdir()
    elsewhere.mkdir()
    made = make_temporary(str(tmp_path), ".aogpt-x-")
    assert os.path.basename(made).startswith(f".aogpt-x-{os.getpid()}@{here}-")
    assert not dead_here.exists() and elsewhere.exists()
