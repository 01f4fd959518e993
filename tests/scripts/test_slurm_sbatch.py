"""scripts/slurm/aogpt.sbatch without SLURM or GPUs: its syntax, the batch arithmetic and the exact
per-node torchrun command of dry runs under a fake SLURM environment (1, 8 and 64 GPUs), one `error:`
line for bad input, and a real 2-process run of the debug recipe through the script's own torchrun line."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, debug_train_args

SCRIPT = ROOT / "scripts" / "slurm" / "aogpt.sbatch"
SMALL, MEDIUM = "train_configs/aogpt_small.toml", "train_configs/aogpt_medium.toml"


def run_script(args: list[str], env: dict | None = None, timeout: int = 30) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RDZV_", "DRY_RUN", "SCONTROL"))}
    full = {**clean, "PYTHON": sys.executable, "SCONTROL": "/nonexistent/scontrol", **(env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout
    )


def line(out: str, prefix: str) -> str:
    (found,) = [ln for ln in out.splitlines() if ln.startswith(prefix)]
    return found


def per_node_command(out: str) -> list[str]:
    return shlex.split(line(out, "per node").split(": ", 1)[1])


def test_bash_syntax():
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("recipe", "slurm", "gpus", "local", "accum", "added"),
    [
        (SMALL, {"SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "1", "SLURM_JOB_NODELIST": "gpu07"}, 1, 16, 32, []),
        (MEDIUM, {"SLURM_NNODES": "1", "SLURM_GPUS_PER_NODE": "h100:8", "SLURM_NODELIST": "gpu[03]"}, 8, 16, 4, []),
        (
            SMALL,
            {"SLURM_JOB_NUM_NODES": "8", "SLURM_GPUS_ON_NODE": "8", "SLURM_JOB_NODELIST": "gpu[01-08]"},
            64,
            8,
            1,
            ["--training.local_batch_size", "8"],
        ),
        (
            MEDIUM,
            {"SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_NODELIST": "gpu[01-04,07-10]", "SLURM_CPUS_ON_NODE": "96"},
            64,
            8,
            1,
            ["--training.local_batch_size", "8"],
        ),
    ],
)
def test_dry_run_prints_the_arithmetic_and_the_exact_per_node_command(recipe, slurm, gpus, local, accum, added):
    env = {**slurm, "SLURM_JOB_ID": "4242", "DRY_RUN": "1"}
    proc = run_script([recipe, "--job.dump_folder", "/shared/runs/x"], env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    nodes, per_node = (8, 8) if gpus == 64 else (1, gpus)
    assert line(proc.stdout, "batch:") == (
        f"batch: global_batch_size 512 = local_batch_size {local} x {gpus} ranks x {accum} gradient accumulation "
        "steps; 512 x seq_len 1024 = 524288 tokens/step"
    )
    host = "gpu01" if nodes == 8 else re.sub(r"\[|\]", "", slurm.get("SLURM_JOB_NODELIST", slurm.get("SLURM_NODELIST")))
    assert per_node_command(proc.stdout) == [
        "torchrun",
        "--nnodes",
        str(nodes),
        "--nproc_per_node",
        str(per_node),
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        f"{host}:29500",
        "--rdzv_id",
        "4242",
        "-m",
        "aogpt_plugin.train",
        "--job.config_file",
        recipe,
        "--job.dump_folder",
        "/shared/runs/x",
        *added,
    ]
    launch = shlex.split(line(proc.stdout, "dry run; would launch:").split(": ", 1)[1])
    cpus = [f"--cpus-per-task={slurm['SLURM_CPUS_ON_NODE']}"] if "SLURM_CPUS_ON_NODE" in slurm else []
    assert launch == ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", *cpus, "--kill-on-bad-exit=1"] + (
        per_node_command(proc.stdout)
    )


def test_scontrol_names_the_rendezvous_host_when_present(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "node-a.cluster\\nnode-b.cluster\\n"\n')
    fake.chmod(0o755)
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node-[a-b]", "SCONTROL": str(fake)}
    proc = run_script(["--dry-run", SMALL], env)
    assert proc.returncode == 0, proc.stderr
    assert line(proc.stdout, "rendezvous:") == "rendezvous: c10d at node-a.cluster:29500, id 7"
    assert "local_batch_size 16 x 16 ranks x 2 gradient accumulation steps" in proc.stdout


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("a1,a2", "a1"), ("gpu-[003-010]", "gpu-003"), ("x[1,3],y2", "x1"), ("n[7]", "n7"), ("solo", "solo")],
)
def test_first_host_without_scontrol(nodelist, host):
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": nodelist}
    proc = run_script(["--dry-run", SMALL], env)
    assert line(proc.stdout, "rendezvous:") == f"rendezvous: c10d at {host}:29500, id 1"


def test_a_local_batch_size_given_on_the_command_line_is_kept():
    proc = run_script(["--dry-run", "--nnodes", "1", "--gpus-per-node", "8", SMALL, "--training.local_batch_size=4"])
    assert proc.returncode == 0, proc.stderr
    assert "local_batch_size 4 x 8 ranks x 16 gradient accumulation steps" in proc.stdout
    assert per_node_command(proc.stdout)[-1] == "--training.local_batch_size=4"  # not added a second time


@pytest.mark.parametrize(("gpus", "accumulation"), [(1, 8), (8, 1)])
def test_llm_cs_micro_batch_of_64_keeps_the_recipes_global_batch(gpus, accumulation):
    """`small` at micro-batch 64 (llm.c's: 8 GPUs x 64 x 1024 = 524,288 tokens a step), one flag on the recipe:
    the same 512 sequences a step, in 8 accumulated micro-batches on one GPU, in one on 8 (docs/training.md)."""
    args = ["--dry-run", "--nnodes", "1", "--gpus-per-node", str(gpus), SMALL, "--training.local_batch_size", "64"]
    proc = run_script(args)
    assert proc.returncode == 0, proc.stderr
    assert line(proc.stdout, "batch:") == (
        f"batch: global_batch_size 512 = local_batch_size 64 x {gpus} ranks x {accumulation} gradient accumulation "
        "steps; 512 x seq_len 1024 = 524288 tokens/step"
    )


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--nnodes", "3", SMALL], {}, "training.global_batch_size=512 is not divisible by 24 GPUs (3 nodes x 8)"),
        (["--nnodes", "128", SMALL], {}, "not divisible by 1024 GPUs"),
        ([SMALL, "--training.local_batch_size", "3"], {}, "training.local_batch_size=3 does not divide the 64"),
        ([SMALL, "--training.global_batch_size=x"], {}, "--training.global_batch_size=x; allowed: an integer"),
        (["--nodes", "2", SMALL], {}, "unknown option --nodes before the recipe"),
        (["--nnodes", "0", SMALL], {}, "--nnodes=0; allowed: a positive integer"),
        (["--gpus-per-node", "eight", SMALL], {}, "--gpus-per-node=eight; allowed: a positive integer"),
        (["--nnodes"], {}, "--nnodes needs a value"),
        ([], {}, "no recipe; usage:"),
        (["train_configs/nope.toml"], {}, "recipe train_configs/nope.toml: no such file"),
        ([SMALL, "--job.config_file", MEDIUM], {}, "the recipe is the first argument"),
        (["--nnodes", "2", SMALL], {}, "--nnodes 2 without SLURM_JOB_NODELIST: set RDZV_HOST"),
        ([SMALL], {"DRY_RUN": "yes"}, "DRY_RUN=yes; allowed: 1 (print only) or 0"),
        ([SMALL], {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "[bad"}, "cannot read the first host"),
        ([SMALL], {"RDZV_PORT": "http"}, "RDZV_PORT=http; allowed: a port number"),
        ([SMALL], {"RDZV_PORT": "70000"}, "RDZV_PORT=70000; allowed: a port number, 1..65535"),  # reported
        ([SMALL], {"RDZV_PORT": "0"}, "RDZV_PORT=0; allowed: a port number, 1..65535"),
        (
            ["--nnodes", "16", SMALL],
            {"SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_NODELIST": "gpu[01-08]"},
            "--nnodes=16 is more than the 8 node(s) of this allocation; allowed: 1..8",
        ),
        (
            ["--gpus-per-node", "8", SMALL],
            {"SLURM_GPUS_ON_NODE": "4"},
            "--gpus-per-node=8 is more than the 4 GPU(s) per node of this allocation; allowed: 1..4",
        ),
        (["--nnodes", "99999999999999999999", SMALL], {}, "allowed: a positive integer up to 999999"),
    ],
)
def test_bad_input_is_one_error_line(args, env, says):
    proc = run_script(["--dry-run", *args], env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (err,) = proc.stderr.splitlines()
    assert err.startswith("error: ") and says in err, err
    assert proc.stdout == ""


def test_a_broken_recipe_is_one_error_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[training\nseq_len = 1\n")
    proc = run_script(["--dry-run", str(bad)])
    assert proc.returncode == 2
    (err,) = proc.stderr.splitlines()
    assert err.startswith(f"error: recipe {bad}: ")


def test_several_nodes_outside_slurm_launch_nothing():
    proc = run_script(["--nnodes", "2", SMALL], {"RDZV_HOST": "10.0.0.1"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("error: --nnodes 2 outside a SLURM job")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_through_the_scripts_torchrun_line(tmp_path):
    """The script's own torchrun line (c10d rendezvous, --nnodes 1 --nproc_per_node 2) on the debug
    recipe, 2 steps over gloo: both ranks train and write one 2-shard checkpoint."""
    dump = tmp_path / "run"
    args = debug_train_args(dump, 2)
    env = {
        "TORCHRUN": f"{sys.executable} -m torch.distributed.run",
        "RDZV_PORT": str(_free_port()),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }
    assert args[0] == "--job.config_file"  # the recipe is the script's first argument
    proc = run_script(["--nnodes", "1", "--gpus-per-node", "2", args[1], *args[2:]], env, 300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "batch: global_batch_size 8 = local_batch_size 4 x 2 ranks x 1 gradient accumulation steps" in out
    assert "--rdzv_backend c10d" in line(proc.stdout, "per node")
    assert re.search(r"step:\s+2\s", out)
    step = dump / "checkpoint" / "step-2"
    assert (step / ".metadata").is_file() and len(list(step.glob("*.distcp"))) == 2
    assert "Traceback" not in out
