"""torchtitan DCP checkpoints on disk: which `step-N` folders exist, which are complete, what they hold.

Read without torchtitan and without a process group, so `aogpt convert`, the launcher's preflight
(before a resume) and its error messages (which checkpoint is the last good one) agree on one rule:
a step folder is complete when its `.metadata` exists and every data file it names is whole.
"""

from __future__ import annotations

import os
import re

from .errors import UserError

STEP_DIR = re.compile(r"^step-(\d+)$")


def step_folders(folder: str) -> list[int]:
    """Steps with a `step-N` folder in `folder`, ascending (complete or not)."""
    if not os.path.isdir(folder):
        return []
    return sorted(int(m.group(1)) for d in os.listdir(folder) if (m := STEP_DIR.match(d)))


def has_metadata(step_dir: str) -> bool:
    return os.path.isfile(os.path.join(step_dir, ".metadata"))


def is_checkpoint_folder(path: str) -> bool:
    """A folder `aogpt convert` takes: a DCP checkpoint (.metadata), a `step-N` folder, or a folder of them
    (complete or not: reading it says what is wrong)."""
    return (
        has_metadata(path) or bool(step_folders(path)) or bool(STEP_DIR.match(os.path.basename(os.path.normpath(path))))
    )


def newest_complete_step(folder: str) -> int | None:
    """The newest step whose save finished (the one torchtitan resumes from), or None."""
    complete = [s for s in step_folders(folder) if has_metadata(os.path.join(folder, f"step-{s}"))]
    return complete[-1] if complete else None


def read_metadata(step_dir: str):
    """The DCP metadata of a step folder, checked: present, readable, and every data file whole."""
    from torch.distributed.checkpoint import FileSystemReader

    if not has_metadata(step_dir):
        raise UserError(f"{step_dir!r} is not a complete DCP checkpoint: it has no .metadata (partial or failed save)")
    try:
        md = FileSystemReader(step_dir).read_metadata()
    except Exception as e:
        raise UserError(f"{step_dir!r}: unreadable .metadata ({type(e).__name__})") from None
    needed: dict[str, int] = {}
    for info in md.storage_data.values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for rel, end in sorted(needed.items()):
        path = os.path.join(step_dir, rel)
        if not os.path.isfile(path) or os.path.getsize(path) < end:
            raise UserError(f"{step_dir!r} is an incomplete checkpoint: data file {rel!r} is missing or truncated")
    return md


def saved_world(step_dir: str) -> dict:
    """What a resume must match: the data-parallel degree the dataloader state was saved for (None
    when the checkpoint holds no dataloader state) and whether it holds the optimizer (a model-only
    final save holds neither and cannot be resumed)."""
    keys = read_metadata(step_dir).state_dict_metadata
    ranks = {m.group(1) for k in keys if (m := re.match(r"^dataloader\.dp_rank_(\d+)(\.|$)", k))}
    return {
        "dp_degree": len(ranks) or None,
        "has_optimizer": any(k.startswith("optimizer.") for k in keys),
    }


def resolve_step_dir(checkpoint_dir: str, step: int | None) -> tuple[str, int | None]:
    """CHECKPOINT_DIR may be one `step-N` folder or the folder holding them (newest complete one wins)."""
    if os.path.isfile(checkpoint_dir):
        raise UserError(
            f"checkpoint directory {checkpoint_dir!r} is a file; give a step-N folder or the folder of them"
        )
    if not os.path.isdir(checkpoint_dir):
        raise UserError(f"checkpoint directory {checkpoint_dir!r} does not exist")
    m = STEP_DIR.match(os.path.basename(os.path.normpath(checkpoint_dir)))
    if m:
        if step is not None and int(m.group(1)) != step:
            raise UserError(f"--step {step} disagrees with {checkpoint_dir!r}; give the parent folder or drop --step")
        return checkpoint_dir, int(m.group(1))
    if has_metadata(checkpoint_dir):
        return checkpoint_dir, step
    steps = step_folders(checkpoint_dir)
    if not steps:
        raise UserError(f"{checkpoint_dir!r} holds neither a DCP checkpoint (.metadata) nor step-N folders")
    if step is not None:
        if step not in steps:
            raise UserError(f"--step {step} not found in {checkpoint_dir!r}; available: {steps}")
        return os.path.join(checkpoint_dir, f"step-{step}"), step
    newest = newest_complete_step(checkpoint_dir)
    if newest is None:
        raise UserError(f"{checkpoint_dir!r} has step folders {steps} but none is complete (no .metadata)")
    return os.path.join(checkpoint_dir, f"step-{newest}"), newest


# ---- what every step folder records about its run (written by training, read by convert/preflight) ----
RECORD_FILE = "aogpt.json"  # beside DCP's .metadata; DCP ignores files it did not write
RECORD_FORMAT = "aogpt-checkpoint"
TOKENIZER_COPY = "tokenizer.json"  # a tokenizer.json the run trained with, copied into the step folder
SPIKE_FACTOR = 1.5  # a step's loss is "normal" when finite and at most this times the lowest loss before it


def write_record(step_dir: str, record: dict, tokenizer_file: str | None = None) -> None:
    """Write `aogpt.json` (and the tokenizer.json copy) into a step folder, atomically."""
    import json
    import shutil

    os.makedirs(step_dir, exist_ok=True)
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, os.path.join(step_dir, TOKENIZER_COPY + ".tmp"))
        os.replace(os.path.join(step_dir, TOKENIZER_COPY + ".tmp"), os.path.join(step_dir, TOKENIZER_COPY))
    tmp = os.path.join(step_dir, RECORD_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"format": RECORD_FORMAT, "format_version": 1, **record}, f, indent=1)
    os.replace(tmp, os.path.join(step_dir, RECORD_FILE))


def read_record(step_dir: str) -> dict | None:
    """The step folder's `aogpt.json`, or None for a checkpoint written before aogpt recorded it."""
    import json

    path = os.path.join(step_dir, RECORD_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{path!r} cannot be read ({type(e).__name__}); the checkpoint's record is damaged") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or "model_args" not in record:
        raise UserError(f"{path!r} is not an {RECORD_FORMAT} record")
    return record


def record_tokenizer(step_dir: str, record: dict) -> str:
    """The tokenizer spec a checkpoint was trained with; a copied tokenizer.json resolves to its path."""
    spec = record["tokenizer"]
    if spec == TOKENIZER_COPY:
        return os.path.join(step_dir, TOKENIZER_COPY)
    return spec


def is_normal_loss(loss: float, lowest_before: float | None) -> bool:
    """The run's normal range: finite, and not a spike above the lowest loss seen before it."""
    import math

    return math.isfinite(loss) and (lowest_before is None or loss <= SPIKE_FACTOR * lowest_before)


def healthy_checkpoint(folder: str, losses: dict[int, tuple[float, bool]], failed_step: int) -> int | None:
    """The newest complete checkpoint before `failed_step` whose weights gave a normal loss.

    The weights of step-N are judged by the loss of step N+1, the first computed with them. `losses`
    maps step -> (loss, normal) as the step guard saw it; step folders add the history they recorded.
    A checkpoint whose next loss is unknown is not recommended."""
    known = {}
    complete = [s for s in step_folders(folder) if s < failed_step and has_metadata(os.path.join(folder, f"step-{s}"))]
    for s in complete:
        record = None
        try:
            record = read_record(os.path.join(folder, f"step-{s}"))
        except UserError:
            pass
        for step, (loss, normal) in ((record or {}).get("losses") or {}).items():
            known[int(step)] = (loss, normal)
    known.update(losses)
    for s in reversed(complete):
        if s + 1 in known and known[s + 1][1]:
            return s
    return None
