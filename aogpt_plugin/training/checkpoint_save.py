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
* a save that fails because the disk is full raises DiskFullError naming the newest complete
  checkpoint; the partial folder is removed and nothing older is touched (torchtitan purges old
  checkpoints only after a successful save).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from ..checkpoints import has_metadata, newest_complete_step, write_record
from .disk_full import DiskFullError, is_disk_full
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
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        if isinstance(e, KeyboardInterrupt) or not is_disk_full(e):
            raise
        if _rank() == 0 and os.path.isdir(step_dir) and not has_metadata(step_dir):
            shutil.rmtree(step_dir, ignore_errors=True)
        newest = newest_complete_step(manager.folder)
        kept = f"{manager.folder}/step-{newest}" if newest is not None else "none"
        raise DiskFullError(
            f"the disk is full: saving {step_dir} failed (No space left on device) and its partial folder was "
            f"removed; the newest complete checkpoint is {kept} and nothing older was deleted; free space "
            "and run the same command again to resume from it"
        ) from None
    if will_save and _rank() == 0:
        record, tokenizer_file = record_of()
        record |= {"step": curr_step, "model_only": bool(last_step and manager.last_save_model_only)}
        record["torchtitan"] = torchtitan_version()
        if guard is not None:  # the losses since the previous save: with the others, the run's history
            since = _last_recorded(manager, curr_step)
            record["losses"] = {s: v for s, v in guard.losses.items() if since < s <= curr_step}
        write_record(step_dir, record, tokenizer_file)
        manager._aogpt_last_recorded = curr_step
    if stopping:
        raise StopRequested(curr_step, guard.stop.signum, step_dir)
    return result


def _last_recorded(manager, curr_step: int) -> int:
    """The step of this run's previous record (its losses are there), 0 at the first save."""
    last = getattr(manager, "_aogpt_last_recorded", 0)
    return last if last < curr_step else 0
