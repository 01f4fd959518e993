"""A run's checkpoints, as aogpt adds to torchtitan's for every version: how one is saved, what it
records, and which one a resume may load. Where checkpoints are found on disk (step folders, complete
ones, the record file) is ../checkpoints.py, which `aogpt convert` reads too; each version's glue
hands the save below its own (titan022/checkpoint.py wraps 0.2.2's `CheckpointManager.save`,
titan03/checkpoint.py overrides 0.3's `_save`).

Saved (`save_recorded`), for an aogpt run:

* every step folder gets `aogpt.json` (`run_record`: the model args, the flavor, the tokenizer spec,
  a tokenizer.json copied in, the `[aogpt]` and `[ema]` settings), with the training loss of the
  steps since the previous save and the torchtitan version that wrote it;
* a stop requested by SIGTERM or Ctrl-C (stop_request.py) saves a complete checkpoint at the step
  every rank agreed on, then raises StopRequested;
* a save that fails because the disk is full (however it arrives: errors.disk_full_reason) raises
  CheckpointDiskFullError naming the newest complete checkpoint; the partial folder is removed and
  nothing older is touched (torchtitan purges old checkpoints only after a successful save);
* a second Ctrl-C during a save removes the partial folder and stops at once (Interrupted), the newest
  complete checkpoint named by the launcher, whether DCP wraps the KeyboardInterrupt in its
  CheckpointException or the interrupted writer fails with an error that no longer carries it (the
  stop request notes the second Ctrl-C where its handler takes it);
* with checkpointing off, a requested stop ends the run after the agreed step with nothing saved
  (`stop_without_checkpoint`, which the glue calls where torchtitan would have saved).

Refused (`check_resume`, run by the preflight before any process group): a checkpoint another
data-parallel degree saved, a model-only final save, a 0.3 checkpoint under 0.2.2, and one whose
record (or, for older folders, whose tensor shapes) is not the model this run builds. A checkpoint at
or past `training.steps` leaves nothing to train (errors.NothingToDo: one line, exit 0); a resumed run
opens with `resume_notice`'s line (the checkpoint, and that an `initial_load_path` is not read). A checkpoint
with NaN/inf weights is refused while it loads (nonfinite.refuse_nonfinite_load).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..checkpoints import (
    has_metadata,
    newest_complete_step,
    read_record,
    record_tokenizer,
    saved_world,
    step_folders,
    write_record,
)
from ..data.manifest import file_sha256
from ..data.tokenizer import load_tokenizer, same_tokenizer
from ..errors import (
    ConfigError,
    DiskFullError,
    Interrupted,
    NothingToDo,
    disk_full_reason,
    folder_bytes,
    interruption,
    space_note,
)
from ..model import FLAVORS
from .stop_request import StopRequested
from .versions import torchtitan_version

if TYPE_CHECKING:
    from .sections import RunSettings


# ---- recorded ----------------------------------------------------------------------------------------
def run_model_args(settings: RunSettings):
    """The model args a run builds (as torchtitan's Trainer does: the flavor, updated from the settings)."""
    args = dataclasses.replace(FLAVORS[settings.model.flavor])
    args.update_from_config(settings)
    return args


def run_record(settings: RunSettings) -> tuple[dict, str | None]:
    """What a step folder records about the run (and the tokenizer.json to copy in, if any)."""
    ao = settings.aogpt
    tokenizer_file = ao.tokenizer if ao.tokenizer.endswith(".json") else None
    record = {
        "model_args": run_model_args(settings).to_dict(),
        "flavor": settings.model.flavor,
        "tokenizer": "tokenizer.json" if tokenizer_file else ao.tokenizer,
        "aogpt": dataclasses.asdict(ao),
        "ema": dataclasses.asdict(settings.ema),
    }
    if tokenizer_file:
        record["tokenizer_source"] = os.path.abspath(tokenizer_file)
        record["tokenizer_sha256"] = file_sha256(tokenizer_file)
    return record, tokenizer_file


# ---- refused: a resume must fit the checkpoint -----------------------------------------------------
def _tokenizer_name(spec: str) -> str:
    return spec if not spec.endswith(".json") else f"{spec} (vocabulary {load_tokenizer(spec).get_vocab_size()})"


def check_resume_matches(settings: RunSettings, step_dir: str) -> None:
    """One ConfigError naming the first setting in which `step_dir` differs from this run's model."""
    saved = read_record(step_dir)
    if saved is None:
        return  # written before checkpoints carried a record: the shape check below the caller applies
    ours, _ = run_record(settings)
    fresh = "resume with the checkpoint's settings, or use a fresh --job.dump_folder"

    def differ(key: str, theirs, mine) -> ConfigError:
        return ConfigError(f"{step_dir!r} was trained with {key}={theirs!r} and this run has {key}={mine!r}; {fresh}")

    if saved.get("flavor") != ours["flavor"] and saved["model_args"] != ours["model_args"]:
        raise differ("model.flavor", saved.get("flavor"), ours["flavor"])
    for key in ("conditioning", "target_pe_dim"):
        if saved["aogpt"].get(key) != ours["aogpt"][key]:
            raise differ(f"aogpt.{key}", saved["aogpt"].get(key), ours["aogpt"][key])
    theirs_tok = record_tokenizer(step_dir, saved)
    if not same_tokenizer(theirs_tok, settings.aogpt.tokenizer):
        raise ConfigError(
            f"{step_dir!r} was trained with aogpt.tokenizer={_tokenizer_name(theirs_tok)} and this run has "
            f"aogpt.tokenizer={_tokenizer_name(settings.aogpt.tokenizer)}; {fresh}"
        )
    if saved["ema"].get("enable") != ours["ema"]["enable"]:
        raise differ("ema.enable", saved["ema"].get("enable"), ours["ema"]["enable"])
    for key, theirs in saved["model_args"].items():
        if ours["model_args"].get(key) != theirs:
            raise differ(f"model args {key} (model.flavor={ours['flavor']!r})", theirs, ours["model_args"].get(key))


def check_resume_version(step_dir: str, installed: str) -> None:
    """A checkpoint written by torchtitan 0.3 cannot be resumed by 0.2.2: 0.3 saves only the learning-rate
    scheduler's `last_epoch` and 0.2.2's load needs its `base_lrs` (it fails after the process group
    starts, on every rank). 0.2.2 checkpoints resume under 0.3. The record names the writer."""
    written = (read_record(step_dir) or {}).get("torchtitan", "")
    if written.startswith("0.3") and not installed.startswith("0.3"):
        raise ConfigError(
            f"{step_dir!r} was written by torchtitan {written} and this run has torchtitan {installed or 'none'}, "
            "which cannot resume it (its scheduler state lacks base_lrs); resume it with torchtitan 0.3, "
            "convert it with `aogpt convert`, or use a fresh --job.dump_folder"
        )


def check_resume_shapes(settings: RunSettings, step_dir: str) -> None:
    """For checkpoints without a record: every saved model/EMA tensor has the shape this run builds."""
    import torch

    from ..checkpoints import read_metadata
    from ..model import AOGPT

    metadata = read_metadata(step_dir).state_dict_metadata
    with torch.device("meta"):
        model = AOGPT(run_model_args(settings))
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if settings.ema.enable:
        ours |= {f"ema.{k}": v for k, v in list(ours.items())}
    for key, shape in ours.items():
        saved = getattr(metadata.get(key), "size", None)
        if saved is not None and tuple(saved) != shape:
            raise ConfigError(
                f"{step_dir!r} holds {key!r} of shape {tuple(saved)} and this run builds {shape} "
                f"(model.flavor={settings.model.flavor!r}, aogpt.conditioning={settings.aogpt.conditioning!r}, "
                f"aogpt.tokenizer={settings.aogpt.tokenizer!r}); resume with the checkpoint's settings, "
                "or use a fresh --job.dump_folder"
            )


def resume_step(settings: RunSettings) -> int | None:
    """The step a run loads from its dump folder, as torchtitan picks it: `checkpoint.load_step`, else the
    newest complete step; None for a fresh start (checkpointing off, or no complete checkpoint)."""
    ckpt = settings.checkpoint
    if not ckpt.enable:
        return None
    folder = os.path.join(settings.job.dump_folder, ckpt.folder)
    return ckpt.load_step if ckpt.load_step != -1 else newest_complete_step(folder)


def check_resume(settings: RunSettings, world_size: int) -> None:
    """The checkpoint a run will resume from must fit it: same data-parallel degree (the dataloader
    state is saved per rank) and a full save (the final model-only save cannot be resumed). A checkpoint
    at or past `training.steps` leaves nothing to train: NothingToDo, whose line says how to go on."""
    ckpt = settings.checkpoint
    if not ckpt.enable:
        return
    folder = os.path.join(settings.job.dump_folder, ckpt.folder)
    step = resume_step(settings)
    if step is None or not os.path.isdir(folder):
        if ckpt.load_step != -1:
            raise ConfigError(f"checkpoint.load_step={ckpt.load_step}: {folder!r} holds no checkpoints")
        _check_initial_load_is_read(settings, folder)
        return
    step_dir = os.path.join(folder, f"step-{step}")
    if not has_metadata(step_dir):
        raise ConfigError(
            f"checkpoint.load_step={step}: {step_dir!r} is not a complete checkpoint; "
            f"complete steps: {[s for s in step_folders(folder) if has_metadata(os.path.join(folder, f'step-{s}'))]}"
        )
    steps = settings.training.steps
    if step >= steps:
        raise NothingToDo(
            f"nothing to train: {step_dir} is a complete checkpoint of step {step} and training.steps is {steps}; "
            f"train further with --training.steps N (N > {step}), or start afresh with another --job.dump_folder"
        )
    saved = saved_world(step_dir)
    fresh = "use a fresh --job.dump_folder to start a new run"
    if (
        saved["dp_degree"] is not None
        and saved["dp_degree"] != world_size
        and "dataloader" not in ckpt.exclude_from_loading
    ):
        raise ConfigError(
            f"{step_dir!r} was saved by {saved['dp_degree']} data-parallel ranks and this run has {world_size}: "
            f"it can only be resumed with {saved['dp_degree']} processes; {fresh}"
        )
    if step != 0 and not saved["has_optimizer"] and "optimizer" not in ckpt.exclude_from_loading:
        raise ConfigError(
            f"{step_dir!r} holds only the model (the final save of a finished run) and cannot be resumed; "
            f"raise training.steps to continue from an earlier full checkpoint with --checkpoint.load_step, or {fresh}"
        )
    if "lr_scheduler" not in ckpt.exclude_from_loading:
        check_resume_version(step_dir, torchtitan_version())
    if "model" not in ckpt.exclude_from_loading:
        if read_record(step_dir) is not None:
            check_resume_matches(settings, step_dir)
        else:
            check_resume_shapes(settings, step_dir)


def _check_initial_load_is_read(settings: RunSettings, folder: str) -> None:
    """torchtitan 0.2.2 reads `initial_load_path` only when the checkpoint folder does not exist: a folder
    without a complete checkpoint (a first save killed part-way) would make it start from random weights."""
    ckpt = settings.checkpoint
    if not ckpt.initial_load_path or not os.path.isdir(folder) or torchtitan_version().startswith("0.3"):
        return
    raise ConfigError(
        f"checkpoint.initial_load_path={ckpt.initial_load_path!r} would not be read: {folder!r} exists and holds no "
        "complete checkpoint, and torchtitan 0.2.2 then starts from random weights; remove that folder, or use "
        "another --job.dump_folder"
    )


def resume_notice(settings: RunSettings) -> str | None:
    """The line a resumed run opens with: the checkpoint it loads and, when one is given, that
    `initial_load_path` is not read (torchtitan reads it only into a dump folder without a checkpoint)."""
    step = resume_step(settings)
    if step is None:
        return None
    ckpt = settings.checkpoint
    step_dir = os.path.join(settings.job.dump_folder, ckpt.folder, f"step-{step}")
    which = "--checkpoint.load_step" if ckpt.load_step != -1 else "the newest complete checkpoint"
    line = f"resuming {step_dir} ({which}) to train up to step {settings.training.steps}"
    if ckpt.initial_load_path:
        line += (
            f"; --checkpoint.initial_load_path {ckpt.initial_load_path} is not read (a run resumes its dump folder's "
            "checkpoint; to start from it, use another --job.dump_folder)"
        )
    return line


# ---- saved ---------------------------------------------------------------------------------------------
class CheckpointDiskFullError(DiskFullError):
    """Saving `step_dir` into `folder` ran out of space; `newest` is the newest complete step of `folder` (or
    None), which the launcher turns into the resume command. `_disk_full` recognises the full disk
    (errors.disk_full_reason: ENOSPC anywhere in DCP's CheckpointException, or torch's zip writer's
    `unexpected pos` on a filesystem with less room than a checkpoint takes)."""

    def __init__(self, reason: str, step_dir: str, partial_removed: bool, needed: int | None, folder: str, newest):
        self.folder, self.newest = folder, newest
        size = space_note(folder, needed, "a checkpoint of this run takes")
        kept = (
            f"the newest complete checkpoint is {folder}/step-{newest} and nothing older was deleted"
            if newest is not None
            else "no complete checkpoint is on disk"
        )
        partial = " and its partial folder was removed" if partial_removed else ""
        super().__init__(f"the disk is full: saving {step_dir} failed ({reason}){partial}; {size}; {kept}")


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
    is the run's record and tokenizer.json (`run_record` of its settings); `guard`
    the run's step guard (or None)."""
    if guard is not None:
        guard.stop.saves = True
        if manager._should_save(curr_step, last_step):  # before anything is written: the steps' checks read
            guard.settle(curr_step)
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
