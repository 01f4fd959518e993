"""Checks a job config the way the Trainer will use it, before any process group or data load.

Every failure is a ConfigError with one line: the key, the bad value, and what is allowed.
"""

from __future__ import annotations

import os

from .data.text_files import list_text_files
from .data.tokenizer import TiktokenTokenizer
from .errors import ConfigError
from .model import FLAVORS

CUSTOM_CONFIG_MODULE = "aogpt_plugin.job_config"


def parse_job_config(argv: list[str]):
    """torchtitan's own parser (TOML < CLI); ConfigError from our sections passes through."""
    from torchtitan.config import ConfigManager

    try:
        return ConfigManager().parse_args(argv)
    except ConfigError:
        raise
    except (ValueError, FileNotFoundError, AssertionError) as e:  # torchtitan's own checks
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(first) from None


def _check_dataset(name: str, path: str | None, section: str) -> None:
    from torchtitan.hf_datasets.text_datasets import DATASETS

    if name not in DATASETS:
        raise ConfigError(f"{section}.dataset={name!r} is not registered; allowed: {', '.join(DATASETS)}")
    if name == "local":
        list_text_files(path or "", key=f"{section}.dataset_path")


def _check_disjoint(job_config) -> None:
    """Never train on the validation text (a folder path would silently include a held-out file)."""
    train, val = job_config.training, job_config.validation
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


def check_job_config(job_config) -> None:
    if job_config.model.name != "aogpt":
        return
    if not hasattr(job_config, "aogpt"):
        raise ConfigError(
            f"job.custom_config_module={job_config.job.custom_config_module!r} lacks the [aogpt] "
            f"section; set it to {CUSTOM_CONFIG_MODULE!r}"
        )
    flavor = job_config.model.flavor
    if flavor not in FLAVORS:
        raise ConfigError(f"model.flavor={flavor!r} is not an aogpt flavor; allowed: {', '.join(FLAVORS)}")
    args = FLAVORS[flavor]
    for section in ("training", "validation"):
        seq_len = getattr(job_config, section).seq_len
        if section == "validation" and not job_config.validation.enable:
            continue
        if not 1 <= seq_len <= args.max_seq_len:
            raise ConfigError(
                f"{section}.seq_len={seq_len} exceeds the positions of model.flavor={flavor!r}; "
                f"allowed: 1..{args.max_seq_len}"
            )
    _check_dataset(job_config.training.dataset, job_config.training.dataset_path, "training")
    if job_config.validation.enable:
        _check_dataset(job_config.validation.dataset, job_config.validation.dataset_path, "validation")
        if job_config.validation.steps < 1:
            raise ConfigError(f"validation.steps={job_config.validation.steps} must be >= 1 for aogpt")
        _check_disjoint(job_config)
    tok = TiktokenTokenizer(job_config.aogpt.tokenizer)
    if tok.get_vocab_size() > args.vocab_size:
        raise ConfigError(
            f"aogpt.tokenizer={job_config.aogpt.tokenizer!r} has {tok.get_vocab_size()} tokens, more "
            f"than model.flavor={flavor!r} embeds ({args.vocab_size})"
        )
