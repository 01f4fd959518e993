"""What aogpt adds to torchtitan's checkpoint save, for every version: a record of the model, a stop
that saves, a full disk named.

torchtitan's CheckpointManager writes DCP step folders and knows nothing of the model it saves. Each
version's glue hands `save_recorded` its own save of the step (0.2.2 wraps `CheckpointManager.save`,
titan022/checkpoint_save.py; 0.3 overrides `_save`, titan03/checkpoint.py), so that, for an aogpt run:

* every step folder gets `aogpt.json` (checkpoint_record.py), with the training loss of the steps
  since the previous save and the torchtitan version that wrote it (a 0.3 checkpoint cannot be
  resumed by 0.2.2: preflight refuses it in one line);
* a stop requested by SIGTERM or Ctrl-C (stop_request.py) saves a complete checkpoint at the step
  every rank agreed on, then raises StopRequested;
* a save that fails because the disk is full (however it arrives: errors.disk_full_reason) raises
  CheckpointDiskFullError (disk_full.py) naming the newest complete checkpoint; the partial folder is removed and
  nothing older is touched (torchtitan purges old checkpoints only after a successful save);
* a second Ctrl-C during a save removes the partial folder and stops at once (Interrupted), the newest
  complete checkpoint named by the launcher, whether DCP wraps the KeyboardInterrupt in its
  CheckpointException or the interrupted writer fails with an error that no longer carries it (the
  stop request notes the second Ctrl-C where the handler takes it);
* with checkpointing off, a requested stop ends the run after the agreed step with nothing saved
  (`stop_without_checkpoint`, which the glue calls where torchtitan would have saved).
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable

from ..checkpoints import has_metadata, newest_complete_step, step_folders, write_record
from ..errors import Interrupted, disk_full_reason, folder_bytes, interruption
from .disk_full import CheckpointDiskFullError
from .stop_request import StopRequested
from .versions import torchtitan_version


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def save_recorded(
    manager,
    curr_step: int,
    last_step: bool,
    save: Callable[[], object],
    wait: Callable[[], None],
    record_of: Callable[[], tuple[dict, str | None]],
    guard,
):
    """`save()` (the version's own save of `curr_step`, forced when the guard's agreed stop step is
    this one), then the step folder's record. `wait()` waits for an asynchronous save; `record_of()`
    is the run's record and tokenizer.json (checkpoint_record.run_record of its job config); `guard`
    the run's step guard (or None)."""
    if guard is not None:
        guard.stop.saves = True
    stopping = guard is not None and guard.stop_step == curr_step and not last_step
    will_save = stopping or manager._should_save(curr_step, last_step)
    step_dir = manager._create_checkpoint_id(curr_step)
    try:
        if stopping:  # a full, resumable checkpoint whatever the interval
            manager._should_save = lambda *a, **k: True
        try:
            result = save()
        finally:
            manager.__dict__.pop("_should_save", None)
        if stopping:
            wait()
        if will_save and _rank() == 0:
            _write_record(manager, curr_step, last_step, step_dir, record_of, guard)
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        stop = interruption(e)
        if stop is None and guard is not None and guard.stop.stopped_at_once is not None:
            stop = Interrupted(guard.stop.stopped_at_once)  # taken inside DCP's writer, it left another error
        if stop is not None:  # a second Ctrl-C (or a signal before the handlers) while writing
            removed = remove_partial_saves(manager.folder, curr_step) if _rank() == 0 else []
            detail = f"the partial {removed[0]} was removed" if removed else None
            raise Interrupted(getattr(stop, "signum", signal.SIGINT), detail) from None
        full = _disk_full(e, manager.folder, step_dir, curr_step)
        if full is None:
            raise
        raise full from None
    if stopping:
        raise StopRequested(curr_step, guard.stop.signum, step_dir)
    return result


def _disk_full(error: BaseException, folder: str, step_dir: str, curr_step: int) -> CheckpointDiskFullError | None:
    """The error to raise when saving `step_dir` failed for lack of space, else None. Rank 0 removes the
    partial folder; the other ranks, which may look after it did (and so see the space it freed), take
    a short write for a full disk as rank 0 judged it."""
    newest = newest_complete_step(folder)
    needed = folder_bytes(os.path.join(folder, f"step-{newest}")) if newest is not None else None
    reason = disk_full_reason(error, folder, needed if _rank() == 0 else 1 << 62)
    if reason is None:
        return None
    removed = remove_partial_saves(folder, curr_step) if _rank() == 0 else []
    partial_removed = step_dir in removed or not os.path.isdir(step_dir)
    return CheckpointDiskFullError(reason, step_dir, partial_removed, needed, folder, newest_complete_step(folder))


# what an HF-format save (`checkpoint.last_save_in_hf`) finishes with instead of DCP's .metadata
HF_SAVE_INDEX = "model.safetensors.index.json"


def remove_partial_saves(folder: str, upto: int) -> list[str]:
    """Remove the step folders after the newest complete one, up to `upto` (the step being saved; an
    asynchronous save fails later), that a save did not finish: neither DCP's `.metadata` nor an HF
    save's index. Steps past `upto` (a resumed run's later saves) are never touched."""
    newest = newest_complete_step(folder)
    removed = []
    for step in step_folders(folder):
        step_dir = os.path.join(folder, f"step-{step}")
        finished = has_metadata(step_dir) or os.path.isfile(os.path.join(step_dir, HF_SAVE_INDEX))
        if (newest is None or step > newest) and step <= upto and not finished:
            shutil.rmtree(step_dir, ignore_errors=True)
            removed.append(step_dir)
    return removed


def stop_without_checkpoint(guard, curr_step: int, last_step: bool = False) -> None:
    """Checkpointing is off: a stop every rank agreed on ends the run after `curr_step`, with nothing
    saved (StopRequested without a folder). The glue calls it where torchtitan would have saved."""
    if guard is None:
        return
    guard.stop.saves = False
    if guard.stop_step == curr_step and not last_step:
        raise StopRequested(curr_step, guard.stop.signum, None)


def _write_record(manager, curr_step: int, last_step: bool, step_dir: str, record_of, guard) -> None:
    record, tokenizer_file = record_of()
    record |= {"step": curr_step, "model_only": bool(last_step and manager.last_save_model_only)}
    record["torchtitan"] = torchtitan_version()
    if guard is not None:  # the losses since the previous save: with the others, the run's history
        since = _last_recorded(manager, curr_step)
        record["losses"] = {s: v for s, v in guard.losses.items() if since < s <= curr_step}
    write_record(step_dir, record, tokenizer_file)
    manager._aogpt_last_recorded = curr_step


def _last_recorded(manager, curr_step: int) -> int:
    """The step of this run's previous record (its losses are there), 0 at the first save."""
    last = getattr(manager, "_aogpt_last_recorded", 0)
    return last if last < curr_step else 0
