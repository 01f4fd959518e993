"""Checks a job config the way the Trainer will use it, before any process group or data load.

The rules are the same for every torchtitan version; what the version knows (its registered datasets
and model converters) is handed in by its glue (titan022/config_parser.py: `registered_names()`). Every failure is a ConfigError with one line: the key, the bad value, and what is allowed. What is
caught here would otherwise fail after the process group starts, on every rank, with a traceback:
wrong TOML types, unsupported parallelism, impossible sizes and rates, unknown optimizers and
converters, unreadable or empty data files, and a resume that cannot match its checkpoint.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection

from ..checkpoints import has_metadata, newest_complete_step, read_record, saved_world, step_folders
from ..data.manifest import verify_shards
from ..data.synthetic import MarkovSpec
from ..data.text_files import check_text_files, list_text_files, prepared_folder
from ..data.tokenizer import load_tokenizer
from ..errors import ConfigError, kind_of
from ..model import FLAVORS
from ..model.args import check_positions
from ..model.gpt2 import GPT2Weights, check_gpt2_matches, check_start_token, is_gpt2_folder, read_gpt2_folder
from .checkpoint_record import check_resume_matches, check_resume_shapes, check_resume_version, run_model_args
from .config_checks import CUSTOM_CONFIG_MODULE, check_types
from .optimizers import check_ema_compatible, check_optimizer_name
from .parallelize import check_parallelism
from .versions import torchtitan_version

SYNTHETIC = "synthetic"  # --training.dataset synthetic --training.dataset_path markov:... (data/synthetic.py)


def _check_dataset(name: str, path: str | None, section: str, datasets: Collection[str], verify: bool) -> None:
    if name == SYNTHETIC:
        MarkovSpec.parse(path or "", f"{section}.dataset_path")
        return
    if name not in datasets:
        raise ConfigError(f"{section}.dataset={name!r} is not registered; allowed: {', '.join(datasets)}")
    if name == "local":
        key = f"{section}.dataset_path"
        files = list_text_files(path or "", key=key)
        folder = prepared_folder(path or "")
        if verify and folder is not None:  # a flipped byte keeps the size: the manifest's sha256 tells
            verify_shards(folder, key, "--aogpt.no-verify-data", _say)
        check_text_files(files, key)


def _say(line: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr, flush=True)


def _check_folders(job_config) -> None:
    """The dump folder and its checkpoint folder are folders (or do not exist yet): a file there
    would otherwise fail at the lock or, worse, at the first save, after the first interval of training."""
    dump = job_config.job.dump_folder
    folders = [("job.dump_folder", dump)]
    if job_config.checkpoint.enable:
        folders.append(("checkpoint.folder", os.path.join(dump, job_config.checkpoint.folder)))
    for key, path in folders:
        if os.path.exists(path) and not os.path.isdir(path):
            what = kind_of(path) or "a file"
            raise ConfigError(
                f"{key}: {path!r} is {what}, not a folder; checkpoints and logs are written there: "
                "use another --job.dump_folder (or --checkpoint.folder)"
            )


def _check_disjoint(job_config) -> None:
    """Never train on the validation text (a folder path would silently include a held-out file)."""
    train, val = job_config.training, job_config.validation
    if train.dataset == SYNTHETIC and val.dataset == SYNTHETIC and train.dataset_path == val.dataset_path:
        return  # one source, disjoint streams (batches.py and validation.py draw from their own seeds)
    if train.dataset != "local" or val.dataset != "local":
        return
    trained = {os.path.realpath(f) for f in list_text_files(train.dataset_path, "training.dataset_path")}
    shared = sorted(
        f for f in list_text_files(val.dataset_path, "validation.dataset_path") if os.path.realpath(f) in trained
    )
    if shared:
        raise ConfigError(
            f"training.dataset_path={train.dataset_path!r} includes the validation file {shared[0]!r}; "
            "allowed: disjoint files (use a glob such as 'corpus/*_train_*.jsonl')"
        )


def _at_least(key: str, value, low, allowed: str | None = None) -> None:
    if value < low:
        raise ConfigError(f"{key}={value} is not allowed; allowed: {allowed or f'>= {low}'}")


def _check_sizes_and_rates(job_config, max_seq_len: int, flavor: str) -> None:
    training, opt, sched = job_config.training, job_config.optimizer, job_config.lr_scheduler
    sections = [("training", training)] + (
        [("validation", job_config.validation)] if job_config.validation.enable else []
    )
    for name, section in sections:
        check_positions(f"{name}.seq_len", section.seq_len, max_seq_len, f"model.flavor={flavor!r}")
        _at_least(f"{name}.local_batch_size", section.local_batch_size, 1)
    _at_least("training.steps", training.steps, 1)
    if training.max_norm <= 0:
        raise ConfigError(f"training.max_norm={training.max_norm} is not allowed; allowed: > 0 (gradient clipping)")
    if job_config.validation.enable:
        _at_least("validation.steps", job_config.validation.steps, 1, ">= 1 for aogpt (a fixed number of batches)")
        _at_least("validation.freq", job_config.validation.freq, 1)
    if not opt.lr > 0:
        raise ConfigError(f"optimizer.lr={opt.lr} is not allowed; allowed: > 0")
    _at_least("optimizer.weight_decay", opt.weight_decay, 0)
    for key, beta in (("optimizer.beta1", opt.beta1), ("optimizer.beta2", opt.beta2)):
        if not 0 <= beta < 1:
            raise ConfigError(f"{key}={beta} is outside the allowed range [0, 1)")
    _at_least("lr_scheduler.warmup_steps", sched.warmup_steps, 0)
    if sched.decay_ratio is not None and not 0 <= sched.decay_ratio <= 1:
        raise ConfigError(f"lr_scheduler.decay_ratio={sched.decay_ratio} is outside the allowed range [0, 1]")


def _check_components(job_config, converters: Collection[str]) -> None:
    check_parallelism(job_config.parallelism)
    check_optimizer_name(job_config.optimizer.name)
    check_ema_compatible(job_config.optimizer.early_step_in_backward, False, job_config.ema.enable)
    for name in job_config.model.converters:
        if name not in converters:
            raise ConfigError(
                f"model.converters: {name!r} is not a converter; allowed: {', '.join(sorted(converters))}"
            )
    if FLOAT8 in job_config.model.converters:
        _check_float8(job_config.quantize.linear.float8, job_config.compile)
    if job_config.checkpoint.enable:
        _at_least("checkpoint.interval", job_config.checkpoint.interval, 1)
        keep = job_config.checkpoint.keep_latest_k
        if keep < 0 or keep == 1:
            raise ConfigError(f"checkpoint.keep_latest_k={keep} is not allowed; allowed: 0 (keep all) or >= 2")


FLOAT8 = "quantize.linear.float8"


def _float8_gpu() -> str | None:
    """The GPU float8 matmuls run on (NVIDIA compute capability >= 8.9), or None."""
    import torch

    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9):
        return torch.cuda.get_device_name()
    return None


def _check_float8(float8, compile_config) -> None:
    """What torchtitan's float8 converter (and aogpt's on 0.3) would refuse after the process group."""
    compiled = compile_config.enable and "model" in compile_config.components
    if float8.emulate and compiled:
        raise ConfigError("quantize.linear.float8.emulate=true runs eager only; allowed with it: compile.enable=false")
    if float8.recipe_name is not None and float8.enable_fsdp_float8_all_gather:
        raise ConfigError(
            f"quantize.linear.float8.recipe_name={float8.recipe_name!r} with enable_fsdp_float8_all_gather=true "
            "is not supported; allowed: one of the two"
        )
    if not float8.emulate and _float8_gpu() is None:
        raise ConfigError(
            f"model.converters=[{FLOAT8!r}] needs an NVIDIA GPU of compute capability >= 8.9 (none here); "
            "allowed here: model.converters=[] or quantize.linear.float8.emulate=true (eager, for tests)"
        )


def _check_resume(job_config, world_size: int) -> None:
    """The checkpoint a run will resume from must fit it: same data-parallel degree (the dataloader
    state is saved per rank) and a full save (the final model-only save cannot be resumed)."""
    ckpt = job_config.checkpoint
    if not ckpt.enable:
        return
    folder = os.path.join(job_config.job.dump_folder, ckpt.folder)
    step = ckpt.load_step if ckpt.load_step != -1 else newest_complete_step(folder)
    if step is None or not os.path.isdir(folder):
        if ckpt.load_step != -1:
            raise ConfigError(f"checkpoint.load_step={ckpt.load_step}: {folder!r} holds no checkpoints")
        return
    step_dir = os.path.join(folder, f"step-{step}")
    if not has_metadata(step_dir):
        raise ConfigError(
            f"checkpoint.load_step={step}: {step_dir!r} is not a complete checkpoint; "
            f"complete steps: {[s for s in step_folders(folder) if has_metadata(os.path.join(folder, f'step-{s}'))]}"
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
            check_resume_matches(job_config, step_dir)
        else:
            check_resume_shapes(job_config, step_dir)


def _check_initial_load(job_config, tokenizer) -> None:
    """Weights to start from in a Hugging Face folder (`initial_load_in_hf`) are read only by a fresh run
    with checkpointing on, model only. On GPT-2's backbone the folder must be a GPT-2 of exactly the
    model this run builds (layers, width, heads, vocabulary, positions, ...) beginning texts with the
    tokenizer's end of text; its files are opened (names and shapes), no tensor is read. GPT-2's layout
    is never written (`last_save_in_hf`): it has no place for the target-position conditioning."""
    ckpt = job_config.checkpoint
    args = run_model_args(job_config)
    flavor = f"model.flavor={job_config.model.flavor!r}"
    if ckpt.last_save_in_hf and args.gpt2_backbone:
        raise ConfigError(
            f"checkpoint.last_save_in_hf=true is not allowed with {flavor} (GPT-2's backbone): GPT-2's layout has "
            "no place for the target-position conditioning; allowed: false (then `aogpt convert` and `aogpt export`)"
        )
    if not ckpt.initial_load_in_hf:
        return
    if not ckpt.enable:
        raise ConfigError(
            "checkpoint.initial_load_in_hf=true is read only with checkpoint.enable=true (torchtitan loads nothing "
            "otherwise and the run would start from random weights); allowed: checkpoint.enable=true"
        )
    if os.path.exists(os.path.join(job_config.job.dump_folder, ckpt.folder)):
        return  # torchtitan resumes from the checkpoint folder and reads no initial weights
    if not ckpt.initial_load_model_only:
        raise ConfigError(
            "checkpoint.initial_load_model_only=false is not allowed with checkpoint.initial_load_in_hf=true "
            "(a Hugging Face folder holds weights only); allowed: true"
        )
    path = ckpt.initial_load_path
    if args.gpt2_backbone:
        if not path:
            raise ConfigError(
                f"checkpoint.initial_load_in_hf=true with {flavor} reads a GPT-2 folder: set "
                "checkpoint.initial_load_path=HF_DIR (config.json + model.safetensors)"
            )
        folder = read_gpt2_folder(path, "checkpoint.initial_load_path")
        check_gpt2_matches(folder, args, flavor)
        check_start_token(folder, tokenizer.eos_id, job_config.aogpt.tokenizer, "aogpt.tokenizer")
        GPT2Weights(folder, args)  # the files' names and shapes, before any process exists
    elif path and is_gpt2_folder(path):  # the paper's backbone: the error names the flavors that hold a GPT-2
        check_gpt2_matches(read_gpt2_folder(path, "checkpoint.initial_load_path"), args, flavor)


def check_job_config(
    job_config, world_size: int = 1, *, datasets: Collection[str], converters: Collection[str]
) -> None:
    """Every rule above; `datasets` and `converters`: the names the installed torchtitan registered."""
    if job_config.model.name != "aogpt":
        return
    if not hasattr(job_config, "aogpt"):
        raise ConfigError(
            f"job.custom_config_module={job_config.job.custom_config_module!r} lacks the [aogpt] "
            f"section; set it to {CUSTOM_CONFIG_MODULE!r}"
        )
    check_types(job_config, "")
    flavor = job_config.model.flavor
    if flavor not in FLAVORS:
        raise ConfigError(f"model.flavor={flavor!r} is not an aogpt flavor; allowed: {', '.join(FLAVORS)}")
    args = FLAVORS[flavor]
    _check_sizes_and_rates(job_config, args.max_seq_len, flavor)
    _check_components(job_config, converters)
    _check_folders(job_config)
    verify = job_config.aogpt.verify_data
    _check_dataset(job_config.training.dataset, job_config.training.dataset_path, "training", datasets, verify)
    if job_config.validation.enable:
        val = job_config.validation
        _check_dataset(val.dataset, val.dataset_path, "validation", datasets, verify)
        _check_disjoint(job_config)
    tokenizer = load_tokenizer(job_config.aogpt.tokenizer)  # the model's vocabulary follows it
    for section in ("training", "validation"):
        sec = getattr(job_config, section)
        if sec.dataset == SYNTHETIC and (section == "training" or job_config.validation.enable):
            spec = MarkovSpec.parse(sec.dataset_path, f"{section}.dataset_path")
            if tokenizer.get_vocab_size() != spec.vocab:
                raise ConfigError(
                    f"{section}.dataset_path={sec.dataset_path!r} draws {spec.vocab} symbols but aogpt.tokenizer="
                    f"{job_config.aogpt.tokenizer!r} has {tokenizer.get_vocab_size()}; allowed: symbols:{spec.vocab}"
                )
    _check_resume(job_config, world_size)
    _check_initial_load(job_config, tokenizer)
