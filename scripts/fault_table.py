"""Inject every fault of docs/reliability.md and record what a user sees and what is kept.

    python scripts/fault_table.py            # prints the markdown table (9 minutes on 2 shared cores)
    python scripts/fault_table.py --write    # and replaces the table in docs/reliability.md

Each row runs the command written in it (in a scratch folder, with TIKTOKEN_CACHE_DIR and
AOGPT_DATA_DIR set as `make` sets them), takes the `error:` line and the exit status it printed,
and checks what is left on disk. The full-disk rows mount small tmpfs filesystems (root only;
elsewhere the row says why it was not run). A row whose command printed a traceback, or more than
one error line, says so in the table: this script reports, it does not hide.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "tests" / "helpers"  # the programs a row runs to inject its fault (the tests run them too)
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
DOCS = ROOT / "docs" / "reliability.md"
START, END = "<!-- fault-table:start -->", "<!-- fault-table:end -->"
TRAIN = "python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml"
SMALL = "--training.steps 4 --training.seq_len 32 --training.local_batch_size 4 --validation.freq 100"
MARKOV = "markov:vocab=32,order=2,branching=4,seed=0"
HELDOUT = "../shared/data/train_corpus/enwiki2015_heldout.jsonl"


def braces(text: str) -> str:
    """`text` as it reads after a row's `command.format(tmp=...)` (a dict literal's braces kept)."""
    return text.replace("{", "{{").replace("}", "}}")


def run(command: str, cwd: Path, env: dict | None = None) -> tuple[int, str]:
    """Exit status and output (stderr, then stdout) of `command`, a bash line run with this venv first on PATH."""
    full_env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(SHARED / "tiktoken_cache"), "AOGPT_DATA_DIR": str(SHARED)}
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    full_env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": path, **(env or {})}
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr + proc.stdout


def seen(code: int, output: str, show: str | None = None) -> str:
    """The one line a user reads: the `error:` line or a stop's `stopped by ...` line (or the line holding
    `show`), and the status. torchrun's own agent reports a failed worker with a traceback of its own; that
    is named, not hidden."""
    agent = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in output
    tracebacks = output.count("Traceback (most recent call last)") - (1 if agent else 0)
    if tracebacks > 0:
        return f"exit {code}; **{tracebacks} traceback(s)**"
    if show is None:
        lines = [ln.removeprefix("error: ") for ln in output.splitlines() if ln.startswith(("error: ", "stopped "))]
    else:
        lines = [ln[ln.index(show) :] for ln in output.splitlines() if show in ln]
    if not lines:
        return f"exit {code}; no error line" if show is None else f"exit {code}; no line with {show!r}"
    text = lines[0]
    short = text if len(text) <= 400 else text[:397] + "..."
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 and not show else ""
    tail = "; then torchrun's failure summary" if agent else ""
    return f"exit {code}: `{short}`{more}{tail}"


def finite_steps(folder: Path) -> str:
    """Which checkpoints are on disk, and whether every tensor in them is finite."""
    import torch
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    if not folder.is_dir():
        return "no checkpoint"
    out = []
    for step_dir in sorted(folder.glob("step-*"), key=lambda p: int(p.name.split("-")[1])):
        if not (step_dir / ".metadata").exists():
            out.append(f"{step_dir.name} (incomplete)")
            continue
        state = _load_state_dict_from_keys(checkpoint_id=str(step_dir))
        flat = list(_tensors(state))
        ok = all(bool(torch.isfinite(t).all()) for t in flat if t.is_floating_point())
        out.append(f"{step_dir.name} ({'all finite' if ok else 'NON-FINITE'})")
    return ", ".join(out) or "no checkpoint"


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def tiny_model_dir(path: Path, scale: float = 1.0) -> None:
    import torch

    from aogpt_plugin.model import AOGPT, AOGPTModelArgs
    from aogpt_plugin.model_dir import save_model

    torch.manual_seed(0)
    model = AOGPT(AOGPTModelArgs(dim=32, n_layers=2, n_heads=4, max_seq_len=32))
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(scale)
    save_model(model, str(path))


def rows(tmp: Path) -> list[tuple[str, str, str, str]]:
    """(fault, command, what the user sees, what is kept) for every fault."""
    out = []

    def add(fault, command, kept=lambda: "", setup=None, display=None, env=None, show=None):
        why_not = setup() if setup else None  # a setup may say why the row cannot run here
        if isinstance(why_not, str):
            out.append((fault, display or command.format(tmp="D"), f"not run here: {why_not}", ""))
            return
        code, output = run(command.format(tmp=tmp), ROOT, env)
        out.append((fault, display or command.format(tmp="D"), seen(code, output, show), kept()))

    def listing(folder: Path):
        return lambda: f"{folder.name}/: {sorted(p.name for p in folder.iterdir()) if folder.is_dir() else 'absent'}"

    def nothing_written(folder: Path):
        return lambda: (
            "nothing written" if not folder.exists() else f"written: {sorted(p.name for p in folder.iterdir())}"
        )

    # ---- training: faults that would lose a run ---------------------------------------------
    add(
        "loss finite, gradient norm NaN (lr 1e4)",
        f"{TRAIN} --job.dump_folder {{tmp}}/nan --optimizer.lr 1e4 --checkpoint.interval 1 --debug.seed 7 --training.steps 10 --validation.freq 100",
        lambda: finite_steps(tmp / "nan" / "checkpoint"),
    )
    add(
        "that stop's advice, run verbatim",
        f"{TRAIN} --job.dump_folder {{tmp}}/nanadv --optimizer.lr 1e4 --checkpoint.interval 1 --debug.seed 7 "
        "--training.steps 10 --validation.freq 100 2>&1 | grep '^error: ' | sed 's/^.*: python -m aogpt_plugin.train/"
        "python -m aogpt_plugin.train/' > {tmp}/advice.sh; bash {tmp}/advice.sh",
        lambda: "the run above stopped at step 3; this one gets past it",
        display=f"(the command the stop above printed) {TRAIN} ... --optimizer.lr 1000 --job.dump_folder D_lr1000",
    )
    add(
        "gradient norm NaN under FSDP, 2 processes (lr 1e6)",
        "torchrun --nproc_per_node=2 -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml "
        "--job.dump_folder {tmp}/nan2 --optimizer.lr 1e6 --checkpoint.interval 1 --training.steps 10 "
        "--validation.freq 100",
        lambda: finite_steps(tmp / "nan2" / "checkpoint"),
    )
    wait_then = (
        "for i in $(seq 900); do grep -q 'step:  3 ' {tmp}/%s.log && break; sleep 0.2; done; kill -%s $P; "
        "wait $P; S=$?; cat {tmp}/%s.log; exit $S"
    )
    long_run = f"{TRAIN} {SMALL} --training.steps 400 --checkpoint.interval 100 --metrics.log_freq 1"
    add(
        "SIGTERM (SLURM preemption) in the middle of a run",
        f"{long_run} --job.dump_folder {{tmp}}/term > {{tmp}}/term.log 2>&1 & P=$!; "
        + wait_then % ("term", "TERM", "term"),
        lambda: finite_steps(tmp / "term" / "checkpoint"),
        display=f"{long_run} --job.dump_folder D & sleep 30; kill -TERM $!",
        show="stopped",
    )
    add(
        "Ctrl-C in the middle of a run",
        f"{long_run} --job.dump_folder {{tmp}}/int > {{tmp}}/int.log 2>&1 & P=$!; " + wait_then % ("int", "INT", "int"),
        lambda: finite_steps(tmp / "int" / "checkpoint"),
        display=f"{long_run} --job.dump_folder D, then Ctrl-C",
        show="stopped",
    )

    def full_disk():
        (tmp / "full" / "checkpoint" / "step-4").mkdir(parents=True)
        (tmp / "full" / "checkpoint" / "step-4" / "__0_0.distcp").symlink_to("/dev/full")

    add(
        "disk full during a checkpoint save",
        f"{TRAIN} --job.dump_folder {{tmp}}/full {SMALL} --training.steps 6 --checkpoint.interval 2",
        lambda: finite_steps(tmp / "full" / "checkpoint"),
        setup=full_disk,
        display=f"(step-4's data file is /dev/full) {TRAIN} --job.dump_folder D {SMALL} --training.steps 6 --checkpoint.interval 2",
    )
    tiny = (
        f"{SMALL} --model.flavor tiny --aogpt.tokenizer symbols:32 --training.dataset synthetic "
        f"--training.dataset_path {MARKOV} --validation.dataset synthetic --validation.dataset_path {MARKOV}"
    )
    add(
        "a real full disk at the 2nd checkpoint save (a 36 MB tmpfs; 22.7 MB per checkpoint)",
        f"{TRAIN} --job.dump_folder {{tmp}}/disk36/run {tiny} --training.steps 6 --checkpoint.interval 2",
        lambda: finite_steps(tmp / "disk36" / "run" / "checkpoint"),
        setup=lambda: small_disk(tmp / "disk36", "36m"),
        display=f"(D/disk36 is `mount -t tmpfs -o size=36m tmpfs D/disk36`) {TRAIN} --job.dump_folder D/disk36/run "
        f"{tiny} --training.steps 6 --checkpoint.interval 2",
    )
    add(
        "SIGTERM during start-up (before training)",
        f"{long_run} --job.dump_folder {{tmp}}/startup > {{tmp}}/startup.log 2>&1 & P=$!; "
        "for i in $(seq 500); do c=$(awk '/SigCgt/{{print $2}}' /proc/$P/status 2>/dev/null); "
        "(( (16#${{c:-0}} >> 14) & 1 )) && break; sleep 0.01; "
        "done; kill -TERM $P; wait $P; S=$?; cat {tmp}/startup.log; exit $S",
        lambda: f"checkpoint folder: {(tmp / 'startup' / 'checkpoint').exists()}",
        display=f"{long_run} --job.dump_folder D & kill -TERM $! (once its handlers are in)",
        show="stopped",
    )
    add(
        "SIGTERM with checkpointing off (`--checkpoint.no-enable`)",
        f"{long_run} --checkpoint.no-enable --job.dump_folder {{tmp}}/off > {{tmp}}/off.log 2>&1 & P=$!; "
        + wait_then % ("off", "TERM", "off"),
        lambda: f"checkpoint folder: {(tmp / 'off' / 'checkpoint').exists()}",
        display=f"{long_run} --checkpoint.no-enable --job.dump_folder D & sleep 30; kill -TERM $!",
        show="stopped",
    )
    slow_save = f"python tests/helpers/slow_save_train.py 2 0.05 {TRAIN.split(' ', 3)[3]} {SMALL} --training.steps 400 --checkpoint.interval 2 --metrics.log_freq 1"
    add(
        "a second Ctrl-C while the stop's checkpoint is being written",
        f"{slow_save} --job.dump_folder {{tmp}}/cc > {{tmp}}/cc.log 2>&1 & P=$!; "
        "for i in $(seq 900); do grep -q 'step:  3 ' {tmp}/cc.log && break; sleep 0.2; done; kill -INT $P; "
        "for i in $(seq 900); do grep -q 'writing checkpoint data' {tmp}/cc.log && break; sleep 0.1; done; sleep 1; "
        "kill -INT $P; wait $P; S=$?; cat {tmp}/cc.log; exit $S",
        lambda: finite_steps(tmp / "cc" / "checkpoint"),
        display=f"{long_run} --checkpoint.interval 2 --job.dump_folder D, then Ctrl-C after step 3 and again while "
        "its checkpoint is written (tests/helpers/slow_save_train.py slows the write down)",
        show="stopped",
    )
    run(f"{TRAIN} --job.dump_folder {tmp}/other {SMALL} --training.steps 2 --checkpoint.interval 2", ROOT)
    for override in ("--model.flavor tiny", "--aogpt.conditioning concat", "--aogpt.tokenizer symbols:100"):
        add(
            f"resume a debugmodel/adaln/gpt2 checkpoint with `{override}`",
            f"{TRAIN} --job.dump_folder {{tmp}}/other {SMALL} {override}",
            lambda: finite_steps(tmp / "other" / "checkpoint"),
        )
    holder = {}
    add(
        "a second run into the same --job.dump_folder",
        f"{TRAIN} --job.dump_folder {{tmp}}/busy {SMALL}",
        lambda: (
            f"the first run's folder untouched: {sorted(p.name for p in (tmp / 'busy').iterdir())}"
            + (holder.pop("lock").close() or "")
        ),
        setup=lambda: holder.update(
            lock=__import__("aogpt_plugin.training.launcher", fromlist=["x"]).hold_dump_folder(str(tmp / "busy"))
        ),
    )
    add(
        "resume a 1-process checkpoint with 2 processes",
        f"{TRAIN} --job.dump_folder {{tmp}}/dp {SMALL} --checkpoint.interval 2 > /dev/null 2>&1 && "
        f"torchrun --nproc_per_node=2 -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml "
        f"--job.dump_folder {{tmp}}/dp {SMALL} --training.steps 6 --checkpoint.interval 2",
        lambda: finite_steps(tmp / "dp" / "checkpoint"),
    )

    def nan_checkpoint():
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

        run(f"{TRAIN} --job.dump_folder {tmp}/nanload {SMALL} --training.steps 2 --checkpoint.interval 2", ROOT)
        step_dir = tmp / "nanload" / "checkpoint" / "step-2"
        state = _load_state_dict_from_keys(checkpoint_id=str(step_dir))
        state["layers.0.attention.wo.weight"][0, 0] = float("nan")
        shutil.rmtree(step_dir)
        dcp.save(state, checkpoint_id=str(step_dir), no_dist=True)

    add(
        "resume from a checkpoint holding a NaN weight",
        f"{TRAIN} --job.dump_folder {{tmp}}/nanload {SMALL}",
        lambda: "the checkpoint is left as it was; nothing is trained or saved",
        setup=nan_checkpoint,
        display=f"(a step-2 checkpoint with one NaN weight) {TRAIN} --job.dump_folder D {SMALL}",
    )

    def killed_save():
        run(f"{TRAIN} --job.dump_folder {tmp}/killed {SMALL} --checkpoint.interval 2", ROOT)
        (tmp / "killed" / "checkpoint" / "step-4" / ".metadata").unlink()  # what a save killed mid-way leaves

    add(
        "a checkpoint save killed before it finished (step-4 has no .metadata)",
        f"{TRAIN} --job.dump_folder {{tmp}}/killed {SMALL} --training.steps 6 --checkpoint.interval 2",
        lambda: finite_steps(tmp / "killed" / "checkpoint"),
        setup=killed_save,
        show="Loading the checkpoint from",
    )

    add(
        "the same command again after the run finished (its checkpoint is at training.steps)",
        f"{TRAIN} --job.dump_folder {{tmp}}/done {SMALL} > /dev/null 2>&1; {TRAIN} --job.dump_folder {{tmp}}/done {SMALL}",
        lambda: finite_steps(tmp / "done" / "checkpoint"),
        display=f"{TRAIN} --job.dump_folder D {SMALL}, twice",
        show="nothing to train",
    )
    add(
        "`--checkpoint.initial_load_path` given to a run whose dump folder holds a checkpoint",
        f"{TRAIN} --job.dump_folder {{tmp}}/done {SMALL} --training.steps 5 --checkpoint.initial_load_path {{tmp}}/w",
        lambda: finite_steps(tmp / "done" / "checkpoint"),
        display=f"(D holds step-4) {TRAIN} --job.dump_folder D {SMALL} --training.steps 5 "
        "--checkpoint.initial_load_path D/w",
        show="resuming",
    )

    # ---- training: bad input, caught before any process group -------------------------------
    bad_toml = tmp / "bad.toml"
    bad_toml.write_text(
        (ROOT / "train_configs" / "aogpt_debug.toml").read_text().replace("p_l2r = 0.1 ", 'p_l2r = "abc" ')
    )
    add(
        'TOML value of the wrong type (`p_l2r = "abc"`)',
        f"{TRAIN.replace('train_configs/aogpt_debug.toml', '{tmp}/bad.toml')} --job.dump_folder {{tmp}}/x",
    )
    typo_toml = tmp / "typo.toml"
    typo_toml.write_text(
        (ROOT / "train_configs" / "aogpt_debug.toml")
        .read_text()
        .replace("[training]\n", "[training]\nstepz = 3\n", 1)
        .replace("[aogpt]\n", '[aogpt]\norderr = "l2r"\n', 1)
    )
    add(
        "two typo'd TOML keys (`[training] stepz`, `[aogpt] orderr`)",
        f"{TRAIN.replace('train_configs/aogpt_debug.toml', '{tmp}/typo.toml')} --job.dump_folder {{tmp}}/x",
        nothing_written(tmp / "x"),
    )
    for override in (
        "--training.stepz 3",
        "--training.steps abc",
        "--parallelism.tensor_parallel_degree 2",
        "--training.local_batch_size 0",
        "--optimizer.lr -1",
        "--optimizer.name SGD",
        "--model.converters float8",
        "--checkpoint.interval 0",
        "--training.seq_len 0",
        "--aogpt.p_l2r abc",
    ):
        add(f"`{override}`", f"{TRAIN} --job.dump_folder {{tmp}}/x {override}", nothing_written(tmp / "x"))
    data = tmp / "data"
    data.mkdir()
    (data / "empty.jsonl").write_bytes(b"")
    (data / "notext.jsonl").write_text('{"title": "no text field"}\n')
    (data / "notjson.jsonl").write_text("plain words, not JSON\n")
    (data / "binary.txt").write_bytes(bytes(range(256)) * 16)
    for name, fault in (
        ("empty.jsonl", "empty training file"),
        ("notext.jsonl", "jsonl records without `text`"),
        ("notjson.jsonl", "non-JSON lines in a .jsonl file"),
        ("binary.txt", "binary (non-UTF-8) training file"),
    ):
        add(
            fault,
            f"{TRAIN} --job.dump_folder {{tmp}}/x --training.dataset_path {{tmp}}/data/{name}",
            lambda: "nothing written",
        )

    (tmp / "ckfile").mkdir()
    (tmp / "ckfile" / "checkpoint").write_text("the user's notes")
    add(
        "a dump folder whose `checkpoint` is a file",
        f"{TRAIN} --job.dump_folder {{tmp}}/ckfile {SMALL}",
        lambda: f"kept: {(tmp / 'ckfile' / 'checkpoint').read_text()!r}",
    )
    add(
        "a typo in the recipe path",
        f"{TRAIN.replace('aogpt_debug', 'aogpt_dbug')} --job.dump_folder {{tmp}}/x",
        nothing_written(tmp / "x"),
    )
    add("`aogpt train` with no arguments", "aogpt train", show="usage: ")

    def no_shared_folder():  # a checkout with nothing beside it: its package and recipes, linked
        (tmp / "alone" / "repo").mkdir(parents=True)
        for name in ("aogpt_plugin", "train_configs"):
            (tmp / "alone" / "repo" / name).symlink_to(ROOT / name)

    add(
        "a checkout without the shared data folder beside it (`../shared/data`)",
        f"cd {{tmp}}/alone/repo && {TRAIN} --job.dump_folder {{tmp}}/x",
        nothing_written(tmp / "x"),
        setup=no_shared_folder,
        env={"PYTHONPATH": str(tmp / "alone" / "repo")},
        display=f"(a checkout with no ../shared beside it) {TRAIN} --job.dump_folder D/x",
    )
    add(
        "a second `--job.config_file`",
        f"{TRAIN} --job.config_file train_configs/aogpt_small.toml --job.dump_folder {{tmp}}/x",
        nothing_written(tmp / "x"),
    )
    for command in (f"{TRAIN} --job.dump_folder {{tmp}}/x", "aogpt train --help"):
        add(
            f"no torchtitan installed: `{command.split(' --job.config_file')[0]}`",
            command,
            nothing_written(tmp / "x"),
            env={"PYTHONPATH": f"{HELPERS}/no_torchtitan{os.pathsep}{ROOT}"},
            display=f"(torchtitan hidden from the import system) {command.format(tmp='D')}",
            show="note: " if command.endswith("--help") else None,  # the page, opening with that line
        )
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} of a small corpus"}) + "\n" for i in range(64)))
    run(f"aogpt data prepare {corpus} {tmp}/prepared --shard-docs 16", ROOT)

    def flip_shard():
        shard = tmp / "prepared" / "shard-00001.jsonl"
        data = bytearray(shard.read_bytes())
        for i in range(len(data) - 65, len(data) - 1):
            data[i] ^= 1
        shard.write_bytes(bytes(data))

    add(
        "a prepared data folder with 64 flipped bytes in a shard (same size)",
        f"{TRAIN} --job.dump_folder {{tmp}}/x --training.dataset_path {{tmp}}/prepared",
        lambda: "refused before any process group; `--aogpt.no-verify-data` trains on it anyway",
        setup=flip_shard,
    )
    add(
        "the SLURM script with `RDZV_PORT=70000`",
        "RDZV_PORT=70000 DRY_RUN=1 bash scripts/slurm/aogpt.sbatch train_configs/aogpt_small.toml",
    )

    # ---- convert, sample, eval ---------------------------------------------------------------
    run(f"{TRAIN} --job.dump_folder {tmp}/conv {SMALL} --training.steps 2 --checkpoint.interval 2", ROOT)
    (tmp / ".aogpt-convert-999999999-left").mkdir()
    add(
        "a convert killed mid-way left `.aogpt-convert-*` behind",
        "aogpt convert {tmp}/conv/checkpoint {tmp}/out2",
        lambda: f"stale temporary removed by the next run: {not (tmp / '.aogpt-convert-999999999-left').exists()}",
        show="converted step",
    )
    (tmp / "afile").write_text("x")
    add("convert into OUT_DIR whose parent is a file", "aogpt convert {tmp}/conv/checkpoint {tmp}/afile/model")
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("the user's own file")
    add(
        "`convert --force` into an ordinary folder holding the user's `notes.txt`",
        "aogpt convert {tmp}/conv/checkpoint {tmp}/mine --force",
        lambda: f"kept: {sorted(p.name for p in (tmp / 'mine').iterdir())}",
    )
    add(
        "two converts into one folder at once",
        "python -c \"from aogpt_plugin.model_dir import check_out_dir; import time; check_out_dir('{tmp}/busy_out', True); "
        'time.sleep(20)" & P=$!; sleep 5; aogpt convert {tmp}/conv/checkpoint {tmp}/busy_out; S=$?; kill $P; exit $S',
        display="(another `aogpt convert` writing D/out) aogpt convert D/conv/checkpoint D/out",
    )
    add(
        "convert a GPT-2 run with `--tokenizer symbols:100`",
        "aogpt convert {tmp}/conv/checkpoint {tmp}/sym100 --tokenizer symbols:100",
        lambda: f"no output folder: {not (tmp / 'sym100').exists()}",
    )

    run(f"aogpt convert {tmp}/conv/checkpoint {tmp}/conv_model", ROOT)
    for command, what in (("convert", "conv/checkpoint"), ("export", "conv_model")):
        add(
            f"`aogpt {command}` onto a full filesystem (a 3 MB tmpfs)",
            f"aogpt {command} {{tmp}}/{what} {{tmp}}/disk3{command}/m",
            listing(tmp / f"disk3{command}"),
            setup=lambda command=command: small_disk(tmp / f"disk3{command}", "3m"),
            display=f"(D/disk is `mount -t tmpfs -o size=3m tmpfs D/disk`) aogpt {command} D/{what} D/disk/m",
        )
    for command, what, sig in (("convert", "conv/checkpoint", "INT"), ("export", "conv_model", "TERM")):
        add(
            f"{'Ctrl-C' if sig == 'INT' else 'SIGTERM'} while `aogpt {command}` writes",
            f"python {HELPERS}/slow_save_command.py {command} {{tmp}}/{what} {{tmp}}/sig{command}/m 2> {{tmp}}/sig.log & P=$!; "
            "for i in $(seq 600); do grep -q 'weights written' {tmp}/sig.log && break; sleep 0.1; done; "
            f"kill -{sig} $P; wait $P; S=$?; cat {{tmp}}/sig.log; exit $S",
            listing(tmp / f"sig{command}"),
            setup=lambda command=command: (tmp / f"sig{command}").mkdir(),
            display=f"aogpt {command} D/{what} D/out/m, then {'Ctrl-C' if sig == 'INT' else 'kill -TERM'} while it "
            "writes",
        )

    def garbage_distcp():
        for f in (tmp / "conv" / "checkpoint" / "step-2").glob("*.distcp"):
            f.write_bytes(bytes(range(256)) * (f.stat().st_size // 256 + 1))

    add(
        "convert a checkpoint whose .distcp bytes are garbage",
        "aogpt convert {tmp}/conv/checkpoint {tmp}/conv_out",
        lambda: f"no output folder: {not (tmp / 'conv_out').exists()}",
        setup=garbage_distcp,
    )
    tiny_model_dir(tmp / "model")
    tiny_model_dir(tmp / "exploded", scale=3e4)
    (tmp / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1"))
    add(
        "`eval ppl --dataset` a non-UTF-8 file",
        "aogpt eval ppl --model {tmp}/model --dataset {tmp}/latin1.txt --order l2r",
    )
    add("`genppl --samples` a non-UTF-8 file", "aogpt eval genppl --samples {tmp}/latin1.txt --scorer {tmp}/model")
    (tmp / "latin1.json").write_bytes(b'{"spans": [{"start": 0, "text": "caf\xe9"}]}')
    add(
        "`sample --infill @FILE`, non-UTF-8 file",
        "aogpt sample --model {tmp}/model --length 8 --infill @{tmp}/latin1.json",
    )
    (tmp / "noargs").mkdir()
    (tmp / "noargs" / "config.json").write_text(json.dumps({"format": "aogpt-converted", "tokenizer": "gpt2"}))
    add("config.json without `model_args`", "aogpt eval ppl --model {tmp}/noargs --dataset ptb --order l2r")
    add("`--model` names a file", "aogpt sample --model {tmp}/afile")
    shutil.copytree(tmp / "model", tmp / "flipped")

    def flip_bytes():
        weights = tmp / "flipped" / "model.safetensors"
        data = bytearray(weights.read_bytes())
        for i in range(1, 65):
            data[-i] ^= 1
        weights.write_bytes(bytes(data))

    add(
        "64 flipped bytes in `model.safetensors`",
        "aogpt sample --model {tmp}/flipped --length 8 --no-progress",
        setup=flip_bytes,
    )
    add("a misspelt option (`--num-smaples`)", "aogpt sample --model {tmp}/model --num-smaples 2")
    add(
        "`aogpt sample --num-samples 1000000000`",
        "aogpt sample --model {tmp}/model --num-samples 1000000000",
        lambda: "refused before any work",
    )
    add("`aogpt sample > /dev/full`", "aogpt sample --model {tmp}/model --length 8 --no-progress > /dev/full")
    # ---- many requests: --requests FILE --out RESULTS -----------------------------------------
    requests = "".join(json.dumps({"prompt": "The city", "length": 24, "seed": i}) + "\n" for i in range(60))
    (tmp / "r.jsonl").write_text(requests)
    (tmp / "r_other.jsonl").write_text(requests.replace("The city", "A river"))
    sample_requests = "aogpt sample --model {tmp}/model --requests {tmp}/%s --out {tmp}/%s --no-progress --batch-size 4"
    run(sample_requests.format(tmp=tmp) % ("r.jsonl", "res.jsonl") + " --seed 0", ROOT)
    res_bytes = lambda: (tmp / "res.jsonl").read_bytes()  # noqa: E731
    before = res_bytes()
    add(
        "`--out` holding the results of another requests file with as many lines",
        sample_requests % ("r_other.jsonl", "res.jsonl"),
        lambda: f"results file unchanged: {res_bytes() == before}",
    )
    (tmp / "r_noseed.jsonl").write_text(
        "".join(json.dumps({"prompt": "The city", "length": 24}) + "\n" for i in range(60))
    )
    run(sample_requests.format(tmp=tmp) % ("r_noseed.jsonl", "res2.jsonl") + " --seed 0", ROOT)
    before2 = (tmp / "res2.jsonl").read_bytes()
    add(
        "`--out` of the same requests sampled with another `--seed`",
        sample_requests % ("r_noseed.jsonl", "res2.jsonl") + " --seed 1",
        lambda: f"results file unchanged: {(tmp / 'res2.jsonl').read_bytes() == before2}",
    )
    many = "".join(json.dumps({"length": 24, "seed": i}) + "\n" for i in range(400))
    (tmp / "r400.jsonl").write_text(many)
    two_runs = sample_requests % ("r400.jsonl", "two.jsonl") + " --batch-size 1"
    add(
        "two runs writing one `--out` at once",
        f"{two_runs} & P=$!; for i in $(seq 600); do [ -s {{tmp}}/two.jsonl ] && break; sleep 0.1; done; {two_runs}; "
        "S=$?; wait $P; exit $S",
        lambda: (
            "the first run's file: "
            + f"{sum(1 for _ in open(tmp / 'two.jsonl'))} lines for 400 requests, indices in order: "
            + str([json.loads(x)["index"] for x in open(tmp / "two.jsonl")] == list(range(400)))
        ),
        display=f"{two_runs.format(tmp='D')} (a second one while the first runs)",
    )
    add(
        "a run killed outright (SIGKILL) left `--out`'s lock file; the same command again",
        f"{two_runs.replace('two.jsonl', 'killed.jsonl')} & P=$!; for i in $(seq 600); do [ -s {{tmp}}/killed.jsonl ] "
        f"&& break; sleep 0.1; done; kill -KILL $P; wait $P; {two_runs.replace('two.jsonl', 'killed.jsonl')}",
        lambda: f"{sum(1 for _ in open(tmp / 'killed.jsonl'))} of 400 results, the killed run's kept",
        show="requests sampled",
        display=f"{two_runs.replace('two.jsonl', 'out.jsonl').format(tmp='D')}, kill -KILL, then the same command",
    )
    add(
        "a real full disk while writing `--out` (a 64 kB tmpfs)",
        sample_requests % ("r400.jsonl", "disk64out/out.jsonl"),
        lambda: (
            "complete lines only, the last ends in a newline: "
            + str((tmp / "disk64out" / "out.jsonl").read_bytes().endswith(b"\n"))
        ),
        setup=lambda: small_disk(tmp / "disk64out", "64k"),
        display="(D/disk is `mount -t tmpfs -o size=64k tmpfs D/disk`) "
        + (sample_requests % ("r400.jsonl", "disk/out.jsonl")).format(tmp="D"),
    )
    (tmp / "latin1.jsonl").write_bytes(b'{"length": 8}\n{"prompt": "caf\xe9"}\n')
    add("a requests file that is not UTF-8", sample_requests % ("latin1.jsonl", "res3.jsonl"))
    add(
        "Ctrl-C during `aogpt sample --requests` with its progress bar drawn",
        f"{(sample_requests % ('r400.jsonl', 'ctrlc.jsonl')).replace(' --no-progress', '')} --batch-size 1 2> "
        "{tmp}/ctrlc.log & P=$!; for i in $(seq 600); do [ -s {tmp}/ctrlc.jsonl ] && break; sleep 0.1; done; "
        "kill -INT $P; wait $P; S=$?; tr '\\r' '\\n' < {tmp}/ctrlc.log | tail -1; exit $S",
        lambda: f"{sum(1 for _ in open(tmp / 'ctrlc.jsonl'))} complete results",
        display="aogpt sample --model D/model --requests D/r.jsonl --out D/out.jsonl, then Ctrl-C",
    )
    lm_eval = "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/model%s --tasks lambada_local --include_path lm_eval_tasks --limit 2"
    add(
        "Ctrl-C right after `aogpt lm-eval` prints its table",
        f"PYTHONUNBUFFERED=1 {lm_eval % ''} > {{tmp}}/lme.out 2> {{tmp}}/lme.log & P=$!; for i in $(seq 6000); do "
        "grep -q '^|lambada_local' {tmp}/lme.out && break; sleep 0.01; done; kill -INT $P; wait $P; S=$?; "
        "cat {tmp}/lme.log; exit $S",
        display=f"{lm_eval.format(tmp='D') % ''}, then Ctrl-C as its table appears",
        show="stopped by",
    )
    add(
        "`--model_args ...,batch_size=4` (lm_eval's own `--batch_size` not given)",
        lm_eval % ",batch_size=4",
        show="|lambada_local|",
    )
    add(
        "`--model_args ...,batch_size=4` and `--batch_size 8`",
        lm_eval % ",batch_size=4" + " --batch_size 8",
    )
    add(
        "`aogpt lm-eval` with an unknown model argument",
        "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/model,bogus_key=1 --tasks lambada_openai",
    )
    add(
        "`aogpt lm-eval` with a model folder that does not exist",
        "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/nope --tasks lambada_openai",
    )
    add(
        "`--save-samples` into a folder that does not exist",
        "aogpt eval genppl --model {tmp}/model --scorer {tmp}/model --num-samples 64 --save-samples {tmp}/no/dir/s.json",
        lambda: "refused before sampling",
    )
    add(
        "`aogpt sample | head -1` (reader leaves early)",
        "aogpt sample --model {tmp}/model --num-samples 50 --length 32 --no-progress | head -1 > /dev/null; exit ${{PIPESTATUS[0]}}",
    )
    add(
        "stdout that cannot encode the text (`PYTHONIOENCODING=ascii`)",
        "aogpt sample --model {tmp}/model --num-samples 2 --length 32 --no-progress > /dev/null",
        env={"PYTHONIOENCODING": "ascii"},
    )
    add(
        "perplexity beyond a float (NLL > 709)",
        "aogpt eval ppl --model {tmp}/exploded --dataset ptb --order l2r --max-chunks 1 --seq-len 32",
        lambda: 'with `--json`: `"ppl": null` and the finite `nll`',
        show="M=1",
    )
    edited = tmp / "edited_tok"
    shutil.copytree(tmp / "model", edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps(config | {"tokenizer": "symbols:100"}))
    add(
        "a model folder whose config.json names a tokenizer smaller than its weights' vocabulary",
        "aogpt sample --model {tmp}/edited_tok --length 8 --no-progress",
    )
    (tmp / "mine.json").write_text("the user's samples")
    add(
        "`eval genppl --save-samples` onto an existing file",
        "aogpt eval genppl --model {tmp}/model --scorer {tmp}/model --num-samples 2 --save-samples {tmp}/mine.json",
        lambda: f"kept: {(tmp / 'mine.json').read_text()!r}",
    )
    add(
        "`aogpt lm-eval` with an unknown task",
        "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/model --tasks lambada_nosuch",
    )
    add(
        "`aogpt lm-eval` with the documented `lambada_openai` task, offline",
        "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/model --tasks lambada_openai --limit 2",
        env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf_home")},
        display="HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 aogpt lm-eval --model aogpt --model_args pretrained=D/model "
        "--tasks lambada_openai --limit 2",
    )

    add(
        "a successful `aogpt lm-eval` run (the pool's SIGTERM reaches its forked workers at shutdown)",
        "aogpt lm-eval --model aogpt --model_args pretrained={tmp}/model --batch_size 2 --tasks lambada_local "
        "--include_path lm_eval_tasks --limit 4",
        show="|lambada_local|",
    )
    add(
        "`aogpt eval ppl --dataset` a prepared folder with 64 flipped bytes in a shard",
        "aogpt eval ppl --model {tmp}/model --dataset {tmp}/prepared --order l2r --max-chunks 1 --seq-len 16",
        lambda: "refused before any scoring; `--no-verify-data` scores it anyway",
    )
    # ---- the Python API: what a script that catches InputError reports ----------------------------------
    for call in (
        "load(123)",
        "generate(length='8')",
        "generate(num_samples='2', length=8)",
        "generate(length=8, top_p='0.5')",
        "generate(length=8, steps=2.5)",
        "generate(length=8, seed='x')",
        "generate(length=8, prompt='the ' * 50)",
        "generate(length=8, speculative=3, steps=4)",
        "logprob([[1, 2, 3]], order=5)",
        "score('some text', orders='2')",
        "generate(prompt=[])",
        "generate(length=[])",
        "generate(seed=[])",
        "generate(length=8, seed=2**64)",
        "generate(length=8, seed=-1)",
        "generate(requests=[{'length': '8'}])",
        "generate(requests=[{'length': 8}], length=[8, 9])",
        "logprob([])",
        "score(['a b c', None])",
    ):
        add(
            f"Python API: `{call}`",
            f'python tests/helpers/api_call.py {{tmp}}/model "{braces(call)}"',
            display=f"lm = aogpt_plugin.load('D/model'); lm.{call}"
            if not call.startswith("load(")
            else f"aogpt_plugin.{call}",
        )

    mixed = "[{'length': 8, 'seed': 0}, {'length': 8, 'steps': 4, 'seed': 1}]"
    add(
        f"Python API: `generate(requests={mixed})`, request 0 against its lone run",
        "python -c \"import aogpt_plugin; lm = aogpt_plugin.load('{tmp}/model'); "
        f"both = lm.generate(requests={braces(mixed)}); alone = lm.generate(requests=[{{{{'length': 8, 'seed': 0}}}}]); "
        "print('request 0 equals its lone run:', both.tokens[0].tolist() == alone.tokens[0].tolist())\"",
        display=f"lm.generate(requests={mixed}) and request 0 alone",
        show="request 0 equals",
    )

    # ---- data prepare, tokenizer train ------------------------------------------------------------
    add(
        "`aogpt data prepare` onto a full filesystem (a 64 kB tmpfs)",
        f"aogpt data prepare {HELDOUT} {{tmp}}/disk64k/prep",
        listing(tmp / "disk64k"),
        setup=lambda: small_disk(tmp / "disk64k", "64k"),
        display=f"(D/disk is `mount -t tmpfs -o size=64k tmpfs D/disk`) aogpt data prepare {HELDOUT} D/disk/prep",
    )
    add(
        "`aogpt data prepare SRC /dev/full`",
        f"aogpt data prepare {HELDOUT} /dev/full",
        lambda: "refused before reading the source",
    )
    for sig in ("INT", "TERM"):
        add(
            f"{'Ctrl-C' if sig == 'INT' else 'SIGTERM'} during `aogpt data prepare`",
            f"python {HELPERS}/slow_hub_prepare.py {{tmp}}/prep{sig}/out 2> {{tmp}}/prep.log & P=$!; "
            "for i in $(seq 600); do grep -q 'documents read' {tmp}/prep.log && break; sleep 0.1; done; "
            f"kill -{sig} $P; wait $P; S=$?; cat {{tmp}}/prep.log; exit $S",
            listing(tmp / f"prep{sig}"),
            setup=lambda sig=sig: (tmp / f"prep{sig}").mkdir(),
            display=f"aogpt data prepare openwebtext D/out (a hub stream that takes minutes), then "
            f"{'Ctrl-C' if sig == 'INT' else 'kill -TERM'}",
        )
    (tmp / "tok.json").write_text("the user's tokenizer")
    add(
        "`aogpt tokenizer train` onto an existing file",
        f"aogpt tokenizer train {HELDOUT} {{tmp}}/tok.json --vocab-size 300",
        lambda: f"kept: {(tmp / 'tok.json').read_text()!r}",
    )
    add(
        "`aogpt tokenizer train` onto a full filesystem (a 16 kB tmpfs)",
        f"aogpt tokenizer train {HELDOUT} {{tmp}}/disk16k/tok.json --vocab-size 600 --max-bytes 100000",
        listing(tmp / "disk16k"),
        setup=lambda: small_disk(tmp / "disk16k", "16k"),
        display=f"(D/disk is `mount -t tmpfs -o size=16k tmpfs D/disk`) aogpt tokenizer train {HELDOUT} D/disk/tok.json "
        "--vocab-size 600 --max-bytes 100000",
    )

    # ---- aogpt serve: each fault against a running server (tests/helpers/serve_fault.py, tests/serve/) ----
    serve_fault = "python tests/helpers/serve_fault.py {tmp}/model %s"
    for case, fault in (
        ("bad-json", "`aogpt serve`: a request body that is not JSON"),
        ("unknown-field", "`aogpt serve`: an unknown field (`frequency_penalty`)"),
        ("bad-type", '`aogpt serve`: a field of the wrong type (`"max_tokens": "8"`)'),
        ("long-prompt", "`aogpt serve`: a prompt too long for the model"),
        ("max-tokens", "`aogpt serve --max-tokens 16`: `max_tokens` 17"),
        ("body-size", "`aogpt serve --max-body-bytes 1024`: a 2 kB body"),
        ("queue-full", "`aogpt serve --slots 1 --max-queue 2`: 2 more samples while one waits"),
        ("no-key", "`aogpt serve --api-key-file KEY`: no key, then a wrong one"),
        ("disconnect", "`aogpt serve`: a streaming client that disconnects"),
        ("nan-step", "`aogpt serve`: non-finite logits in a step (a huge target embedding, finite weights)"),
        ("sigterm", "`aogpt serve`: SIGTERM with a request in flight"),
        ("second-signal", "`aogpt serve`: SIGTERM, then Ctrl-C while draining"),
    ):
        add(fault, serve_fault % case, show="seen: ")

    # ---- the authors' layout ----------------------------------------------------------------------
    add(
        "weights saved in the authors' layout (`--checkpoint.last_save_in_hf`): the head's padded rows",
        f"{TRAIN} --job.dump_folder {{tmp}}/hf {SMALL} --training.steps 2 --checkpoint.interval 100 "
        "--checkpoint.last_save_in_hf --checkpoint.last_save_model_only",
        lambda: padded_rows(tmp / "hf" / "checkpoint" / "step-2"),
        show="Training starts",
    )
    return out


def padded_rows(step_dir: Path) -> str:
    from safetensors.torch import load_file

    files = sorted(step_dir.glob("*.safetensors"))
    if not files:
        return "no safetensors file"
    bias = load_file(str(files[0]))["lm_head.bias"]
    return f"`lm_head.bias` rows 50257..{bias.shape[0] - 1}: {sorted(set(bias[50257:].tolist()))} (masked)"


MOUNTED: list[Path] = []


def small_disk(path: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` at `path` (a real full disk); None when mounted, else why it cannot be."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
        )
    except OSError as e:
        return f"no mount command ({e})"
    if proc.returncode:
        return "a tmpfs cannot be mounted (" + (proc.stderr.strip().splitlines() or ["mount failed"])[-1] + ")"
    MOUNTED.append(path)
    return None


def table(rows_: list[tuple[str, str, str, str]]) -> str:
    head = "| fault | command that injects it | what the user sees | what is kept |\n|---|---|---|---|\n"
    cell = lambda s: s.replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return head + "".join(f"| {cell(a)} | `{cell(b)}` | {cell(c)} | {cell(d)} |\n" for a, b, c, d in rows_)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"replace the table in {DOCS.relative_to(ROOT)}")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aogpt-faults-"))
    os.environ["AOGPT_CACHE_DIR"] = str(tmp / "cache")  # shards that matched their sha256: not the user's ~/.cache
    try:
        text = table(rows(tmp)).replace(str(tmp), "D")
    finally:
        for path in MOUNTED:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(text)
    if args.write:
        doc = DOCS.read_text()
        start, end = doc.index(START) + len(START), doc.index(END)
        DOCS.write_text(doc[:start] + "\n" + text + doc[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
