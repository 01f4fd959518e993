"""`python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml` (also under torchrun;
`aogpt train` runs it too).

With an accelerator this is torchtitan.train after a config check. Without one it first makes
torchtitan run on the CPU (titan022/launch.py, titan03/cpu.py). The installed torchtitan's glue
(titan022/launch.py or titan03/launch.py) reads the same recipes and options on both versions.
Before torchtitan is imported, the recipe is checked (config_checks.py: none given prints what to
give; a missing one is named with the nearest). Before any process group starts, the job config is
parsed and checked (preflight.py) and rank 0 takes an exclusive lock on the dump folder, so a second
run cannot overwrite this one's checkpoints and TensorBoard logs. A bad value, or a folder in use, is
one `error:` line (printed by rank 0) and exit status 2. A run whose checkpoint is at or past
`training.steps` says in one line that there is nothing to train (exit 0); a resumed run's first line
names the checkpoint it loads. A run stopped by the step guard (step_guard.py) is one `error:` line
naming the step, what was non-finite, the newest checkpoint whose weights still gave a normal loss and
the command that resumes it, exit status 3. SIGTERM or a first Ctrl-C finish the step, save it
(checkpointing.py) and exit 128 + the signal number with one line, a stop and not an error, naming the
checkpoint and the resume command (with checkpointing off: after the step, saying nothing was saved); a
second Ctrl-C stops at once (exit 130), also in the middle of a save, whose partial folder is removed;
a signal during start-up stops at once in one line. A full disk during a save is one `error:` line
naming the newest complete checkpoint and its resume command (exit 2). Every resume command is the
command the run was started with (`program`: `aogpt train` says so through TRAIN_COMMAND_ENV), with
`--checkpoint.load_step` only when the checkpoint to resume is not the newest. Without torchtitan
installed, one line names the extras to install.
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
from typing import TYPE_CHECKING

from ..errors import NothingToDo, UserError
from ..train import TRAIN_COMMAND_ENV

if TYPE_CHECKING:
    from .sections import RunSettings

LOCK_FILE = ".aogpt-train.lock"
TORCHTITAN_HELP = (
    "loading torchtitan's full help: it imports torch and torchtitan first (10 s to a minute on 2 CPU cores); "
    "aogpt's own options at once: aogpt train --help"
)


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


def command_line(argv: list[str], world_size: int, drop: tuple[str, ...] = (), **options) -> str:
    """This run's command line, as it was started (`program`), with `options` ({"optimizer.lr": 1e-4}) set
    and the keys in `drop` left out, replacing earlier choices of the same keys."""
    keys = {"__" + k.replace("-", "_") for k in (*options, *drop)}
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        key = arg.split("=", 1)[0].replace("-", "_")
        if key in keys:
            skip = "=" not in arg
            continue
        kept.append(arg)
    tail = [x for k, v in options.items() for x in (f"--{k}", v if isinstance(v, str) else f"{v:g}")]
    return f"{program(world_size)} {shlex.join(kept + tail)}"


def program(world_size: int, env: dict[str, str] | None = None) -> str:
    """How this run was started, from torchrun's variables and the one `aogpt train` sets (TRAIN_COMMAND_ENV):
    one process (`aogpt train` or `python -m aogpt_plugin.train`), one node, or several nodes (then the line
    is run on every node, with the rendezvous this run used; under SLURM: the same sbatch)."""
    env = os.environ if env is None else env
    if world_size == 1:
        return env.get(TRAIN_COMMAND_ENV) or "python -m aogpt_plugin.train"
    local = int(env.get("LOCAL_WORLD_SIZE", world_size))
    if local >= world_size:
        return f"torchrun --nproc_per_node={world_size} -m aogpt_plugin.train"
    host, port = env.get("MASTER_ADDR", "HOST"), env.get("MASTER_PORT", "29500")
    return (
        f"torchrun --nnodes={world_size // local} --nproc_per_node={local} --rdzv_backend c10d "
        f"--rdzv_endpoint {host}:{port} -m aogpt_plugin.train"
    )


def resume_command(argv: list[str], world_size: int, folder: str, step: int, **options) -> str:
    """The command that resumes checkpoint `step` of `folder` (with `options` set): the run's own command
    when `step` is the newest complete checkpoint, which the same command loads (a `--checkpoint.load_step`
    it gave is dropped), else with `--checkpoint.load_step step`."""
    from ..checkpoints import newest_complete_step

    if newest_complete_step(folder) == step:
        return command_line(argv, world_size, drop=("checkpoint.load_step",), **options)
    return command_line(argv, world_size, **{"checkpoint.load_step": step, **options})


def _complete_steps(folder: str) -> list[int]:
    from ..checkpoints import has_metadata, step_folders

    return [s for s in step_folders(folder) if has_metadata(os.path.join(folder, f"step-{s}"))]


def stopped_message(error, settings: RunSettings, argv: list[str], world_size: int) -> str:
    """The NaN/inf stop: name the newest checkpoint whose weights still gave a normal loss, and a
    command that resumes it with a tenth of the learning rate."""
    from ..checkpoints import healthy_checkpoint

    folder = os.path.join(settings.job.dump_folder, settings.checkpoint.folder)
    lr = settings.optimizer.lr / 10
    complete = _complete_steps(folder) if settings.checkpoint.enable else []
    good = healthy_checkpoint(folder, getattr(error, "losses", {}), error.step) if complete else None
    if good is None:
        fresh = settings.job.dump_folder.rstrip("/") + f"_lr{lr:g}"
        command = command_line(argv, world_size, **{"optimizer.lr": lr, "job.dump_folder": fresh})
        why = (
            f"no checkpoint on disk (complete steps: {', '.join(map(str, complete))}) was followed by a loss in the "
            "run's normal range"
            if complete
            else "no checkpoint is on disk"
        )
        return f"{error}. {why}: start again with a lower learning rate in a fresh folder: {command}"
    command = resume_command(argv, world_size, folder, good, **{"optimizer.lr": lr})
    return (
        f"{error}. The newest checkpoint whose weights still gave a normal training loss is {folder}/step-{good} "
        f"(complete steps: {', '.join(map(str, complete))}); resume it with a lower learning rate: {command}"
    )


def stop_request_message(stop, argv: list[str], world_size: int) -> str:
    """The line of a stop that saved (SIGTERM, a first Ctrl-C): a stop, not an error."""
    if stop.step_dir is None:  # checkpointing off
        return (
            f"{stop}; checkpointing is off (checkpoint.enable=false), so nothing was saved: a new run starts "
            "from step 1 (turn checkpointing on with --checkpoint.enable to resume after a stop)"
        )
    command = resume_command(argv, world_size, os.path.dirname(stop.step_dir), stop.step)
    return f"{stop}: {stop.step_dir} is a complete checkpoint; resume with: {command}"


def interrupted_message(error, settings: RunSettings | None, argv: list[str], world_size: int) -> str:
    """A stop at once: a second Ctrl-C, or a signal before training (start-up). Names what was removed
    (a partial save) and the newest complete checkpoint with the command that resumes it."""
    from ..checkpoints import newest_complete_step
    from ..errors import interrupted_line

    how = interrupted_line(error, "stopped at once")
    if settings is None:
        return f"{how} during start-up; nothing was trained or saved"
    folder = os.path.join(settings.job.dump_folder, settings.checkpoint.folder)
    newest = newest_complete_step(folder) if settings.checkpoint.enable else None
    if newest is None:
        return f"{how}; no checkpoint is on disk"
    command = resume_command(argv, world_size, folder, newest)
    return f"{how}; the newest complete checkpoint is {folder}/step-{newest}; resume with: {command}"


def disk_full_message(error, argv: list[str], world_size: int) -> str:
    """The full disk's line, with the command that resumes the newest complete checkpoint once there is room."""
    if error.newest is None:
        return f"{error}; free space and run the same command again (it starts from step 1)"
    return f"{error}; free space, then resume with: {resume_command(argv, world_size, error.folder, error.newest)}"


def forget_elastic_traceback() -> None:
    """torchtitan's `Trainer.train` is wrapped in torchelastic's `@record`, which writes the exception's
    traceback to $TORCHELASTIC_ERROR_FILE for torchrun to print, once per rank, in its failure summary.
    A stop this launcher has already explained in one line needs no traceback there."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path and os.path.isfile(path):
        os.remove(path)


def main() -> int:
    from ..errors import exit_status, stop_at_once_on_signals

    argv = sys.argv[1:]
    # torchrun's rank and world, or a world of one (what default_to_one_process will set)
    launch = _Launch(argv, int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
    try:  # from the handlers' first moment: a signal anywhere after them is answered below, in one line
        stop_at_once_on_signals()  # start-up: SIGTERM and Ctrl-C stop at once (the optimizers take over)
        logging.raiseExceptions = False  # a log file on a full disk (0.3's structured log): no traceback per record
        default_to_one_process()
        return launch.start()
    except KeyboardInterrupt as e:  # a signal before the optimizers exist, or a second Ctrl-C
        forget_elastic_traceback()
        message = interrupted_message(e, launch.settings, argv, launch.world_size)
        return launch.say(message, exit_status(e))  # a stop, not an error
    except BrokenPipeError:  # `--help | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


class _Launch:
    """One launch: its command line, rank, world and (once parsed) the run settings the messages name."""

    def __init__(self, argv: list[str], rank: int, world_size: int):
        self.argv, self.rank, self.world_size = argv, rank, world_size
        self.settings: RunSettings | None = None  # the run's settings, once parsed

    def say(self, line: str, code: int) -> int:
        """The run's last line (rank 0) and its exit status: a stop, or nothing to do."""
        if self.rank == 0:
            print(line, file=sys.stderr, flush=True)
        return code

    def fail(self, message: str, code: int) -> int:
        return self.say(f"error: {message}", code)

    def start(self) -> int:
        from .config_checks import check_config_file, check_own_sections, usage
        from .versions import TORCHTITAN_MISSING, check_torch_for_titan03, check_torchtitan_installed

        argv, world_size = self.argv, self.world_size
        if not argv:  # what to give, not torchtitan's complaint about a missing section
            return self.say(usage(program(world_size)), 2)
        try:
            check_config_file(argv, program(world_size))  # before torchtitan's import: a typo answered at once
            from .job_config import JobConfig as OwnSections  # aogpt's sections (tyro, no torch)

            check_own_sections(OwnSections, argv)  # [aogpt] and [ema] too; torchtitan's sections once imported
            check_torchtitan_installed()
            check_torch_for_titan03()
        except UserError as e:
            return self.fail(str(e), 2)
        if self.rank == 0 and any(a in ("-h", "--help") for a in argv):
            print(TORCHTITAN_HELP, file=sys.stderr, flush=True)

        from ..library_noise import quiet_library_noise
        from . import installed_glue, register
        from .cpu import has_accelerator

        quiet_library_noise(has_accelerator())  # before torchtitan (its float8 converters) imports torchao
        try:
            glue = installed_glue()  # titan022/launch.py or titan03/launch.py, for the installed torchtitan
            glue.enable_cpu()  # on a machine without an accelerator, before torchtitan's trainer is imported
        except ModuleNotFoundError as e:  # found but not importable (a broken or half-removed install)
            if (e.name or "").split(".")[0] != "torchtitan":
                raise
            return self.fail(TORCHTITAN_MISSING, 2)
        from .checkpointing import CheckpointDiskFullError
        from .preflight import announce_resume, check_settings
        from .step_guard import NonFiniteStepError
        from .stop_request import StopRequested

        register()  # through the package: 0.2.2's TrainSpec, nothing on 0.3
        try:
            config, settings = glue.parse_command_line(argv)  # the version's config and the run's settings, built once
            check_settings(settings, world_size, **glue.registered_names())
            lock = hold_dump_folder(settings.job.dump_folder) if self.rank == 0 else None  # noqa: F841 - held
        except NothingToDo as e:  # the checkpoint is at or past training.steps
            return self.say(str(e), 0)
        except UserError as e:
            return self.fail(str(e), 2)
        self.settings = settings
        announce_resume(settings)

        run_trainer = glue.trainer_for(self.rank, config)
        try:
            run_trainer()  # torchtitan's own main, on the config parsed and checked here
        except NonFiniteStepError as e:
            forget_elastic_traceback()
            return self.fail(stopped_message(e, settings, argv, world_size), 3)
        except StopRequested as e:  # a stop the user asked for: its line is no error
            forget_elastic_traceback()
            return self.say(stop_request_message(e, argv, world_size), 128 + e.signum)
        except CheckpointDiskFullError as e:
            forget_elastic_traceback()
            return self.fail(disk_full_message(e, argv, world_size), 2)
        except UserError as e:  # e.g. a checkpoint with NaN weights, refused while loading
            forget_elastic_traceback()
            return self.fail(str(e), 2)
        return 0


if __name__ == "__main__":
    sys.exit(main())
