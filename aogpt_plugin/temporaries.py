"""Temporary sibling folders for atomic writes (a model folder, a prepared data folder): made with the
writer's pid in their name, so the next writer can remove those a killed writer left behind."""

from __future__ import annotations

import os
import shutil
import tempfile


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
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
