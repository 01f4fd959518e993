"""A checkpoint save that ran out of disk: recognised as it really arrives (errors.disk_full_reason:
ENOSPC anywhere in DCP's CheckpointException, or torch's zip writer's `unexpected pos` on a
filesystem with less room than a checkpoint of the run takes), its partial folder removed, and one
error naming the newest complete checkpoint, what a save needs and what is free."""

from __future__ import annotations

import os
import shutil

from ..checkpoints import has_metadata, newest_complete_step, step_folders
from ..errors import DiskFullError, disk_full_reason, folder_bytes, free_bytes, size_text


class CheckpointDiskFullError(DiskFullError):
    """A checkpoint save ran out of disk space; `newest` is the newest complete step (or None), which
    the launcher names in the resume command."""

    def __init__(self, message: str, newest: int | None):
        self.newest = newest
        super().__init__(message)


def remove_partial_saves(folder: str) -> list[str]:
    """Remove the step folders newer than the newest complete one that have no `.metadata` (what a
    failed or interrupted save of this run leaves; one run per dump folder, so nothing else's)."""
    newest = newest_complete_step(folder)
    removed = []
    for step in step_folders(folder):
        step_dir = os.path.join(folder, f"step-{step}")
        if (newest is None or step > newest) and not has_metadata(step_dir):
            shutil.rmtree(step_dir, ignore_errors=True)
            removed.append(step_dir)
    return removed


def checkpoint_disk_full(error: BaseException, folder: str, step_dir: str, rank: int) -> CheckpointDiskFullError | None:
    """The error to raise when saving `step_dir` into `folder` failed for lack of space, else None.
    Rank 0 removes the partial folder; the other ranks, which may look after it did (and so see the
    space it freed), take a short write for a full disk as rank 0 judged it."""
    newest = newest_complete_step(folder)
    needed = folder_bytes(os.path.join(folder, f"step-{newest}")) if newest is not None else None
    if rank == 0:
        reason = disk_full_reason(error, folder, needed)
    else:
        reason = disk_full_reason(error, folder, 1 << 62)
    if reason is None:
        return None
    removed = remove_partial_saves(folder) if rank == 0 else []
    newest = newest_complete_step(folder)
    free = size_text(free_bytes(folder))
    size = (
        f"a checkpoint of this run takes {size_text(needed)} and {free} are free there"
        if needed
        else f"{free} are free there"
    )
    kept = (
        f"the newest complete checkpoint is {folder}/step-{newest} and nothing older was deleted"
        if newest is not None
        else "no complete checkpoint is on disk"
    )
    partial = " and its partial folder was removed" if step_dir in removed or not os.path.isdir(step_dir) else ""
    return CheckpointDiskFullError(
        f"the disk is full: saving {step_dir} failed ({reason}){partial}; {size}; {kept}", newest
    )
