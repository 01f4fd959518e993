"""A checkpoint save that ran out of disk, as one error: the step that failed, what a checkpoint of the
run takes and what is free, and the newest complete checkpoint (which the launcher turns into the
resume command). checkpoint_save.py recognises the full disk (errors.disk_full_reason: ENOSPC
anywhere in DCP's CheckpointException, or torch's zip writer's `unexpected pos` on a filesystem with
less room than a checkpoint takes) and removes the partial folder first."""

from __future__ import annotations

from ..errors import DiskFullError, space_note


class CheckpointDiskFullError(DiskFullError):
    """Saving `step_dir` into `folder` ran out of space; `newest` is the newest complete step (or None)."""

    def __init__(self, reason: str, step_dir: str, partial_removed: bool, needed: int | None, folder: str, newest):
        self.newest = newest
        size = space_note(folder, needed, "a checkpoint of this run takes")
        kept = (
            f"the newest complete checkpoint is {folder}/step-{newest} and nothing older was deleted"
            if newest is not None
            else "no complete checkpoint is on disk"
        )
        partial = " and its partial folder was removed" if partial_removed else ""
        super().__init__(f"the disk is full: saving {step_dir} failed ({reason}){partial}; {size}; {kept}")
