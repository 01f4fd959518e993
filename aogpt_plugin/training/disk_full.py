"""A checkpoint save that ran out of disk: how to recognise it among DCP's exceptions, and its error."""

from __future__ import annotations

import errno

from ..errors import UserError


class DiskFullError(UserError):
    """A checkpoint save ran out of disk space."""


def is_disk_full(error: BaseException) -> bool:
    """Whether `error`, its causes, or a rank's failure inside DCP's CheckpointException is ENOSPC."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if getattr(e, "errno", None) == errno.ENOSPC or "No space left" in str(e) or "file write failed" in str(e):
            return True
        todo += [e.__cause__, e.__context__]
        failures = getattr(e, "failures", None)  # DCP's CheckpointException: rank -> exception
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
    return False
