"""`python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml` (also under torchrun).

With an accelerator this is torchtitan.train after a config check. Without one it first makes
torchtitan run on the CPU (cpu_support.py). Either way, before any process group starts, the job
config is parsed and checked (preflight.py) and rank 0 takes an exclusive lock on the dump folder,
so a second run cannot overwrite this one's checkpoints and TensorBoard logs. A bad value, or a
folder in use, is one `error:` line (printed by rank 0) and exit status 2; a run stopped by the
step guard (loss.py) is one `error:` line naming the step, what was non-finite, the newest
checkpoint on disk and the command that resumes from it, and exit status 3.
Run without torchrun, it is a world of one process. Ranks other than 0 log warnings only, unless
AOGPT_LOG_ALL_RANKS=1.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import socket
import sys

from .cpu_support import enable_torchtitan_on_cpu, has_accelerator
from .errors import UserError

LOCK_FILE = ".aogpt-train.lock"


def default_to_one_process() -> None:
    """Outside torchrun, run as a world of one (torchtitan reads torchrun's environment)."""
    if "LOCAL_RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for key, value in env.items():
        os.environ.setdefault(key, value)


def hold_dump_folder(folder: str):
    """An exclusive lock on the dump folder for this process's lifetime (released on exit or crash)."""
    os.makedirs(folder, exist_ok=True)
    f = open(os.path.join(folder, LOCK_FILE), "a+")  # noqa: SIM115 - held open for the whole run
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise UserError(
            f"--job.dump_folder {folder!r} is in use by another training run ({holder}); two runs in one "
            "folder overwrite each other's checkpoints and logs: use another --job.dump_folder"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    return f


def resume_command(argv: list[str], step: int, lr: float, world_size: int) -> str:
    """This run's command line, resuming `step` with learning rate `lr` (older choices of both dropped)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        key = arg.split("=", 1)[0].replace("-", "_")
        if key in ("__checkpoint.load_step", "__optimizer.lr"):
            skip = "=" not in arg
            continue
        kept.append(arg)
    launcher = "python -m" if world_size == 1 else f"torchrun --nproc_per_node={world_size} -m"
    tail = ["--checkpoint.load_step", str(step), "--optimizer.lr", f"{lr:g}"]
    return f"{launcher} aogpt_plugin.train {shlex.join(kept + tail)}"


def stopped_message(error, job_config, argv: list[str], world_size: int) -> str:
    from .checkpoints import newest_complete_step

    folder = os.path.join(job_config.job.dump_folder, job_config.checkpoint.folder)
    newest = newest_complete_step(folder) if job_config.checkpoint.enable else None
    if newest is None:
        return (
            f"{error}. No checkpoint is on disk: lower --optimizer.lr (now {job_config.optimizer.lr:g}) and start again"
        )
    from .checkpoints import has_metadata, step_folders

    steps = [s for s in step_folders(folder) if has_metadata(os.path.join(folder, f"step-{s}"))]
    command = resume_command(argv, newest, job_config.optimizer.lr / 10, world_size)
    return (
        f"{error}. The newest checkpoint on disk is {folder}/step-{newest} (complete steps: "
        f"{', '.join(map(str, steps))}); resume one with a lower learning rate: {command}"
    )


def forget_elastic_traceback() -> None:
    """torchtitan's `Trainer.train` is wrapped in torchelastic's `@record`, which writes the exception's
    traceback to $TORCHELASTIC_ERROR_FILE for torchrun to print, once per rank, in its failure summary.
    A stop this launcher has already explained in one line needs no traceback there."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path and os.path.isfile(path):
        os.remove(path)


def _quiet_other_ranks(titan, rank: int) -> None:
    """torchtitan logs every line on every rank; keep rank 0's (others: warnings) unless asked."""
    if rank == 0 or os.environ.get("AOGPT_LOG_ALL_RANKS") == "1":
        return
    init_logger = titan.init_logger

    def init_quiet_logger():
        init_logger()
        logging.getLogger().setLevel(logging.WARNING)

    titan.init_logger = init_quiet_logger


def main() -> int:
    argv = sys.argv[1:]
    default_to_one_process()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def fail(message: str, code: int) -> int:
        if rank == 0:
            print(f"error: {message}", file=sys.stderr, flush=True)
        return code

    if not has_accelerator():
        enable_torchtitan_on_cpu()
    from .loss import NonFiniteStepError
    from .preflight import check_job_config, parse_job_config
    from .train_spec import register

    register()
    try:
        job_config = parse_job_config(argv)
        check_job_config(job_config, world_size)
        lock = hold_dump_folder(job_config.job.dump_folder) if rank == 0 else None  # noqa: F841 - held
    except UserError as e:
        return fail(str(e), 2)

    import torchtitan.train as titan

    _quiet_other_ranks(titan, rank)
    try:
        titan.main(titan.Trainer)  # parses sys.argv again, exactly as `-m torchtitan.train` would
    except NonFiniteStepError as e:
        forget_elastic_traceback()
        return fail(stopped_message(e, job_config, argv, world_size), 3)
    except UserError as e:  # e.g. a checkpoint with NaN weights, refused while loading
        forget_elastic_traceback()
        return fail(str(e), 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
