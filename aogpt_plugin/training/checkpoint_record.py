"""What a checkpoint's step folder records about its run (`aogpt.json`, checkpoints.py), and the resume
check against it.

The record holds the model args, the flavor, the tokenizer spec (a tokenizer.json is copied in), the
`[aogpt]` and `[ema]` settings; the save wrap (titan022/checkpoint_save.py) adds the training loss of
the steps since the previous save. `aogpt convert` builds the model from it and the preflight
compares it with a resuming run (`check_resume_matches`; `check_resume_shapes` for older folders).
"""

from __future__ import annotations

import dataclasses
import os

from ..checkpoints import read_record, record_tokenizer
from ..data.manifest import file_sha256
from ..data.tokenizer import load_tokenizer, same_tokenizer
from ..errors import ConfigError
from ..model import FLAVORS


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


def check_resume_shapes(job_config, step_dir: str) -> None:
    """For checkpoints without a record: every saved model/EMA tensor has the shape this run builds."""
    import torch

    from ..checkpoints import read_metadata
    from ..model import AOGPT

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
