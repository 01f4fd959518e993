"""What aogpt adds to torchtitan's checkpoint save: a record of the model, a stop that saves, a full disk named.

torchtitan's CheckpointManager writes DCP step folders and knows nothing of the model it saves. aogpt
wraps its `save` once (`install`, called at registration) so that, for an aogpt run:

* every step folder gets `aogpt.json` (checkpoints.py): the model args, the flavor, the tokenizer
  spec (a tokenizer.json is copied in), the `[aogpt]` and `[ema]` settings, the training loss of the
  steps since the previous save. `aogpt convert` builds the model from it and the launcher's
  preflight compares it with a resuming run (`check_resume_matches`);
* a stop requested by SIGTERM or Ctrl-C (stop_request.py) saves a complete checkpoint at the step
  every rank agreed on, then raises StopRequested;
* a save that fails because the disk is full raises DiskFullError naming the newest complete
  checkpoint; the partial folder is removed and nothing older is touched (torchtitan purges old
  checkpoints only after a successful save).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil

from .checkpoints import (
    has_metadata,
    newest_complete_step,
    read_record,
    record_tokenizer,
    write_record,
)
from .data.tokenizer import load_tokenizer, same_tokenizer
from .errors import ConfigError, UserError
from .model import FLAVORS
from .model_dir import file_sha256
from .stop_request import StopRequested


class DiskFullError(UserError):
    """A checkpoint save ran out of disk space."""


def run_model_args(job_config):
    """The model args a run builds (as torchtitan's Trainer does: the flavor, updated from the config)."""
    args = dataclasses.replace(FLAVORS[job_config.model.flavor])
    args.update_from_config(job_config)
    return args


def run_record(job_config) -> tuple[dict, str | None]:
    """What a step folder records about the run (and the tokenizer.json to copy in, if any)."""
    ao = job_config.aogpt
    tokenizer_file = ao.tokenizer if ao.tokenizer.endswith(".json") else None
    record = {
        "model_args": run_model_args(job_config).to_dict(),
        "flavor": job_config.model.flavor,
        "tokenizer": "tokenizer.json" if tokenizer_file else ao.tokenizer,
        "aogpt": dataclasses.asdict(ao),
        "ema": dataclasses.asdict(job_config.ema),
    }
    if tokenizer_file:
        record["tokenizer_source"] = os.path.abspath(tokenizer_file)
        record["tokenizer_sha256"] = file_sha256(tokenizer_file)
    return record, tokenizer_file


# ---- resume: the checkpoint must be the model this run builds -------------------------------------
def _tokenizer_name(spec: str) -> str:
    return spec if not spec.endswith(".json") else f"{spec} (vocabulary {load_tokenizer(spec).get_vocab_size()})"


def check_resume_matches(job_config, step_dir: str) -> None:
    """One ConfigError naming the first setting in which `step_dir` differs from this run's model."""
    saved = read_record(step_dir)
    if saved is None:
        return  # written before checkpoints carried a record: the shape check below the caller applies
    ours, _ = run_record(job_config)
    fresh = "resume with the checkpoint's settings, or use a fresh --job.dump_folder"

    def differ(key: str, theirs, mine) -> ConfigError:
        return ConfigError(f"{step_dir!r} was trained with {key}={theirs!r} and this run has {key}={mine!r}; {fresh}")

    if saved.get("flavor") != ours["flavor"] and saved["model_args"] != ours["model_args"]:
        raise differ("model.flavor", saved.get("flavor"), ours["flavor"])
    for key in ("conditioning", "target_pe_dim"):
        if saved["aogpt"].get(key) != ours["aogpt"][key]:
            raise differ(f"aogpt.{key}", saved["aogpt"].get(key), ours["aogpt"][key])
    theirs_tok = record_tokenizer(step_dir, saved)
    if not same_tokenizer(theirs_tok, job_config.aogpt.tokenizer):
        raise ConfigError(
            f"{step_dir!r} was trained with aogpt.tokenizer={_tokenizer_name(theirs_tok)} and this run has "
            f"aogpt.tokenizer={_tokenizer_name(job_config.aogpt.tokenizer)}; {fresh}"
        )
    if saved["ema"].get("enable") != ours["ema"]["enable"]:
        raise differ("ema.enable", saved["ema"].get("enable"), ours["ema"]["enable"])
    for key, theirs in saved["model_args"].items():
        if ours["model_args"].get(key) != theirs:
            raise differ(f"model args {key} (model.flavor={ours['flavor']!r})", theirs, ours["model_args"].get(key))


def check_resume_shapes(job_config, step_dir: str) -> None:
    """For checkpoints without a record: every saved model/EMA tensor has the shape this run builds."""
    import torch

    from .checkpoints import read_metadata
    from .model import AOGPT

    metadata = read_metadata(step_dir).state_dict_metadata
    with torch.device("meta"):
        model = AOGPT(run_model_args(job_config))
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if job_config.ema.enable:
        ours |= {f"ema.{k}": v for k, v in list(ours.items())}
    for key, shape in ours.items():
        saved = getattr(metadata.get(key), "size", None)
        if saved is not None and tuple(saved) != shape:
            raise ConfigError(
                f"{step_dir!r} holds {key!r} of shape {tuple(saved)} and this run builds {shape} "
                f"(model.flavor={job_config.model.flavor!r}, aogpt.conditioning={job_config.aogpt.conditioning!r}, "
                f"aogpt.tokenizer={job_config.aogpt.tokenizer!r}); resume with the checkpoint's settings, "
                "or use a fresh --job.dump_folder"
            )


# ---- the save hook -------------------------------------------------------------------------------
def _is_disk_full(error: BaseException) -> bool:
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


def _aogpt_run(manager):
    """(trainer, guard) when `manager` saves an aogpt run, else None."""
    trainer = manager.states.get("train_state")
    job_config = getattr(trainer, "job_config", None)
    if job_config is None or job_config.model.name != "aogpt" or not hasattr(job_config, "aogpt"):
        return None
    return trainer, getattr(manager.states.get("optimizer"), "guard", None)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def install(checkpoint_manager_cls) -> None:
    """Wrap `checkpoint_manager_cls.save` (idempotent)."""
    original = checkpoint_manager_cls.save
    if getattr(original, "aogpt", False):
        return

    def save(self, curr_step: int, last_step: bool = False) -> None:
        run = _aogpt_run(self) if self.enable else None
        if run is None:
            return original(self, curr_step, last_step)
        trainer, guard = run
        stopping = guard is not None and guard.stop_step == curr_step and not last_step
        will_save = stopping or self._should_save(curr_step, last_step)
        step_dir = self._create_checkpoint_id(curr_step)
        try:
            if stopping:  # a full, resumable checkpoint whatever the interval
                self._should_save = lambda *a, **k: True
            try:
                original(self, curr_step, last_step)
            finally:
                self.__dict__.pop("_should_save", None)
            if stopping:
                self._async_wait()
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            if isinstance(e, KeyboardInterrupt) or not _is_disk_full(e):
                raise
            if _rank() == 0 and os.path.isdir(step_dir) and not has_metadata(step_dir):
                shutil.rmtree(step_dir, ignore_errors=True)
            newest = newest_complete_step(self.folder)
            kept = f"{self.folder}/step-{newest}" if newest is not None else "none"
            raise DiskFullError(
                f"the disk is full: saving {step_dir} failed (No space left on device) and its partial folder was "
                f"removed; the newest complete checkpoint is {kept} and nothing older was deleted; free space "
                "and run the same command again to resume from it"
            ) from None
        if will_save and _rank() == 0:
            record, tokenizer_file = run_record(trainer.job_config)
            record |= {"step": curr_step, "model_only": bool(last_step and self.last_save_model_only)}
            if guard is not None:  # the losses since the previous save: with the others, the run's history
                since = _last_recorded(self, curr_step)
                record["losses"] = {s: v for s, v in guard.losses.items() if since < s <= curr_step}
            write_record(step_dir, record, tokenizer_file)
            self._aogpt_last_recorded = curr_step
        if stopping:
            raise StopRequested(curr_step, guard.stop.signum, step_dir)

    save.aogpt = True
    checkpoint_manager_cls.save = save


def _last_recorded(manager, curr_step: int) -> int:
    """The step of this run's previous record (its losses are there), 0 at the first save."""
    last = getattr(manager, "_aogpt_last_recorded", 0)
    return last if last < curr_step else 0
