"""Checks a run's settings (RunSettings, sections.py) the way the Trainer will use them, before any process
group or data load.

The rules are the same for every torchtitan version, which each glue hands the same RunSettings; what
the version knows (its registered datasets and model converters) is handed in by its glue
(`registered_names()` of titan022/launch.py or titan03/launch.py). Every failure is a ConfigError with one line: the key, the bad value, and what is allowed. What is
caught here would otherwise fail after the process group starts, on every rank, with a traceback:
unsupported parallelism, impossible sizes and rates, unknown optimizers and converters, unreadable or
empty data files, and a resume that cannot match its checkpoint (checkpointing.check_resume). A run whose
checkpoint is at or past its last step has nothing to train (NothingToDo: one line, status 0); a resumed run
says which checkpoint it loads, in one line (printed by rank 0) before torchtitan's own log. Wrong
TOML types are refused while the glue parses (titan022/config_parser.py, titan03/recipe.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection

from ..data.manifest import verify_shards
from ..data.synthetic import MarkovSpec
from ..data.text_files import check_text_files, list_text_files, prepared_folder
from ..data.tokenizer import load_tokenizer
from ..errors import ConfigError, kind_of
from ..model import FLAVORS
from ..model.args import check_positions
from ..model.gpt2 import GPT2Weights, check_gpt2_matches, check_start_token, is_gpt2_folder, read_gpt2_folder
from .checkpointing import check_resume, resume_notice, resume_step, run_model_args
from .optimizers import check_ema_compatible, check_optimizer_name
from .parallelize import check_parallelism
from .progress import progress_seconds
from .sections import RunSettings

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


def _check_folders(settings: RunSettings) -> None:
    """The dump folder and its checkpoint folder are folders (or do not exist yet): a file there
    would otherwise fail at the lock or, worse, at the first save, after the first interval of training."""
    dump = settings.job.dump_folder
    folders = [("job.dump_folder", dump)]
    if settings.checkpoint.enable:
        folders.append(("checkpoint.folder", os.path.join(dump, settings.checkpoint.folder)))
    for key, path in folders:
        if os.path.exists(path) and not os.path.isdir(path):
            what = kind_of(path) or "a file"
            raise ConfigError(
                f"{key}: {path!r} is {what}, not a folder; checkpoints and logs are written there: "
                "use another --job.dump_folder (or --checkpoint.folder)"
            )


def _check_disjoint(settings: RunSettings) -> None:
    """Never train on the validation text (a folder path would silently include a held-out file)."""
    train, val = settings.training, settings.validation
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


def _check_sizes_and_rates(settings: RunSettings, max_seq_len: int, flavor: str) -> None:
    training, opt, sched = settings.training, settings.optimizer, settings.lr_scheduler
    sections = [("training", training)] + ([("validation", settings.validation)] if settings.validation.enable else [])
    for name, section in sections:
        check_positions(f"{name}.seq_len", section.seq_len, max_seq_len, f"model.flavor={flavor!r}")
        _at_least(f"{name}.local_batch_size", section.local_batch_size, 1)
    _at_least("training.steps", training.steps, 1)
    if training.max_norm <= 0:
        raise ConfigError(f"training.max_norm={training.max_norm} is not allowed; allowed: > 0 (gradient clipping)")
    if settings.validation.enable:
        _at_least("validation.steps", settings.validation.steps, 1, ">= 1 for aogpt (a fixed number of batches)")
        _at_least("validation.freq", settings.validation.freq, 1)
    if not opt.lr > 0:
        raise ConfigError(f"optimizer.lr={opt.lr} is not allowed; allowed: > 0")
    _at_least("optimizer.weight_decay", opt.weight_decay, 0)
    for key, beta in (("optimizer.beta1", opt.beta1), ("optimizer.beta2", opt.beta2)):
        if not 0 <= beta < 1:
            raise ConfigError(f"{key}={beta} is outside the allowed range [0, 1)")
    _at_least("lr_scheduler.warmup_steps", sched.warmup_steps, 0)
    if sched.decay_ratio is not None and not 0 <= sched.decay_ratio <= 1:
        raise ConfigError(f"lr_scheduler.decay_ratio={sched.decay_ratio} is outside the allowed range [0, 1]")


def _check_components(settings: RunSettings, converters: Collection[str]) -> None:
    check_parallelism(settings.parallelism)
    check_optimizer_name(settings.optimizer.name)
    check_ema_compatible(settings.optimizer.early_step_in_backward, False, settings.ema.enable)
    for name in settings.model.converters:
        if name not in converters:
            raise ConfigError(
                f"model.converters: {name!r} is not a converter; allowed: {', '.join(sorted(converters))}"
            )
    if FLOAT8 in settings.model.converters:
        _check_float8(settings.float8, settings.compile)
    if settings.checkpoint.enable:
        _at_least("checkpoint.interval", settings.checkpoint.interval, 1)
        keep = settings.checkpoint.keep_latest_k
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


def _check_initial_load(settings: RunSettings, tokenizer) -> None:
    """Weights to start from in a Hugging Face folder (`initial_load_in_hf`) are read only by a fresh run
    with checkpointing on, model only. On GPT-2's backbone the folder must be a GPT-2 of exactly the
    model this run builds (layers, width, heads, vocabulary, positions, ...) beginning texts with the
    tokenizer's end of text; its files are opened (names and shapes), no tensor is read. GPT-2's layout
    is never written (`last_save_in_hf`): it has no place for the target-position conditioning."""
    ckpt = settings.checkpoint
    args = run_model_args(settings)
    flavor = f"model.flavor={settings.model.flavor!r}"
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
    if resume_step(settings) is not None:
        return  # torchtitan resumes from the checkpoint folder and reads no initial weights (resume_notice says so)
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
        check_start_token(folder, tokenizer.eos_id, settings.aogpt.tokenizer, "aogpt.tokenizer")
        GPT2Weights(folder, args)  # the files' names and shapes, before any process exists
    elif path and is_gpt2_folder(path):  # the paper's backbone: the error names the flavors that hold a GPT-2
        check_gpt2_matches(read_gpt2_folder(path, "checkpoint.initial_load_path"), args, flavor)


def check_settings(
    settings: RunSettings, world_size: int = 1, *, datasets: Collection[str], converters: Collection[str]
) -> None:
    """Every rule above; `datasets` and `converters`: the names the installed torchtitan registered."""
    if settings.model.name != "aogpt":
        return
    progress_seconds()  # $AOGPT_PROGRESS_SECONDS, read at the first step: a bad value is refused now
    flavor = settings.model.flavor
    if flavor not in FLAVORS:
        raise ConfigError(f"model.flavor={flavor!r} is not an aogpt flavor; allowed: {', '.join(FLAVORS)}")
    args = FLAVORS[flavor]
    _check_sizes_and_rates(settings, args.max_seq_len, flavor)
    _check_components(settings, converters)
    _check_folders(settings)
    verify = settings.aogpt.verify_data
    _check_dataset(settings.training.dataset, settings.training.dataset_path, "training", datasets, verify)
    if settings.validation.enable:
        val = settings.validation
        _check_dataset(val.dataset, val.dataset_path, "validation", datasets, verify)
        _check_disjoint(settings)
    tokenizer = load_tokenizer(settings.aogpt.tokenizer)  # the model's vocabulary follows it
    for section in ("training", "validation"):
        sec = getattr(settings, section)
        if sec.dataset == SYNTHETIC and (section == "training" or settings.validation.enable):
            spec = MarkovSpec.parse(sec.dataset_path, f"{section}.dataset_path")
            if tokenizer.get_vocab_size() != spec.vocab:
                raise ConfigError(
                    f"{section}.dataset_path={sec.dataset_path!r} draws {spec.vocab} symbols but aogpt.tokenizer="
                    f"{settings.aogpt.tokenizer!r} has {tokenizer.get_vocab_size()}; allowed: symbols:{spec.vocab}"
                )
    check_resume(settings, world_size)  # a run with nothing left to train stops here, in one line
    _check_initial_load(settings, tokenizer)


def announce_resume(settings: RunSettings) -> None:
    """A resumed run's first line (rank 0), before torchtitan's log: the checkpoint it loads, and that an
    `initial_load_path` it was given is not read."""
    notice = resume_notice(settings)
    if notice:
        _say(notice)
