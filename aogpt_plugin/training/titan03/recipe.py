"""The TOML recipes (train_configs/*.toml, written in torchtitan 0.2.2's key names) as torchtitan 0.3
configs, and the 0.2.2-style command line as 0.3 options.

The recipes stay the single source of truth: `load_recipe` reads one into an AOGPTTrainer.Config
(handed in by the entry points: launch.py, aogpt_plugin/config_registry.py) through KEYS (recipe key -> 0.3 path), checks every value's type, and refuses unknown keys in one
line naming each with its section. Keys 0.3 has no place for and that change nothing for aogpt
(`job.description`, `experimental.custom_import`, ...) are DROPPED. `translate_cli` renames a
0.2.2 command line (`--job.dump_folder D --validation.freq 4 --model.flavor F`) for 0.3's parser,
so a user's overrides keep their meaning on both versions.
"""

from __future__ import annotations

import dataclasses
import os
import typing

from ...errors import ConfigError
from ..config_checks import check_types, matches_type, read_recipe, type_name
from ..sections import AOGPT, EMA

# recipe key -> 0.3 config path; "section.*": every key of the 0.3 section of that name
KEYS = {
    "job.dump_folder": "dump_folder",
    "model.hf_assets_path": "hf_assets_path",
    "training.dataset": "dataloader.dataset",
    "training.dataset_path": "dataloader.dataset_path",
    "validation.enable": "validator.enable",
    "validation.freq": "validator.freq",
    "validation.steps": "validator.steps",
    "validation.dataset": "validator.dataloader.dataset",
    "validation.dataset_path": "validator.dataloader.dataset_path",
    "validation.seq_len": "validator.val_seq_len",
    "validation.local_batch_size": "validator.val_local_batch_size",
    "profiling.enable_profiling": "profiler.enable_profiling",
    "profiling.save_traces_folder": "profiler.save_traces_folder",
    "profiling.profile_freq": "profiler.profile_freq",
    "model.converters": "model.converters",
}
SECTIONS = ("training", "metrics", "optimizer", "lr_scheduler", "parallelism", "checkpoint", "compile", "debug")
# what 0.3 has no place for and aogpt needs no counterpart of (the 0.3 module and Config replace them)
DROPPED = {
    "job.description",
    "job.custom_config_module",
    "experimental.custom_import",
    "model.name",
    "activation_checkpoint.selective_ac_option",
}
CLI_SPECIAL = ("model.flavor", "activation_checkpoint.mode", "job.config_file")  # read before 0.3 parses
SPECIAL = CLI_SPECIAL


def _target(key: str, config) -> str | None:
    """The 0.3 path of recipe key `key`, or None if 0.3 (and aogpt on it) has no such key."""
    if key in KEYS:
        return KEYS[key]
    section, _, leaf = key.partition(".")
    if section in SECTIONS and "." not in leaf:
        names = {f.name for f in dataclasses.fields(getattr(config, section))}
        return key if leaf in names else None
    return None


def _hint(config, path: str):
    *parents, leaf = path.split(".")
    obj = config
    for p in parents:
        obj = getattr(obj, p)
    return obj, leaf, typing.get_type_hints(type(obj)).get(leaf, typing.Any)


def _set(config, path: str, value, key: str) -> None:
    obj, leaf, hint = _hint(config, path)
    if not matches_type(value, hint):
        raise ConfigError(f"{key}={value!r} has the wrong type; allowed: {type_name(hint)}")
    setattr(obj, leaf, list(value) if isinstance(value, tuple) else value)


def _activation_checkpoint(mode: str):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    choices = {"none": None, "full": FullAC.Config, "selective": SelectiveAC.Config}
    if mode not in choices:
        raise ConfigError(f"activation_checkpoint.mode={mode!r} is not allowed; allowed: {', '.join(choices)}")
    return choices[mode]() if choices[mode] else None


def _section(cls, name: str, values: dict):
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = [k for k in values if k not in known]
    if unknown:
        raise ConfigError(f"unknown key{'s' * (len(unknown) > 1)}: " + ", ".join(f"[{name}] {k}" for k in unknown))
    return cls(**values)  # its own checks (sections.py), one ConfigError line each


def _quantize(values: dict, unknown: list[str]):
    """`[quantize.linear.float8]` as float8.py's Quantize; other quantize sections (MX, grouped mm,
    which aogpt does not run on 0.3) go to `unknown`."""
    from .float8 import Float8Config, Quantize, QuantizeLinear

    linear = values.get("linear", {})
    unknown += [f"[quantize] {k}" for k in values if k != "linear"]
    unknown += [f"[quantize.linear] {k}" for k in linear if k != "float8"]
    float8 = _section(Float8Config, "quantize.linear.float8", linear.get("float8", {}))
    check_types(float8, "quantize.linear.float8")  # aogpt's own sections check theirs as they are built
    return Quantize(linear=QuantizeLinear(float8=float8))


def load_recipe(
    path: str, config_cls, model_registry, *, root: str | None = None, flavor: str | None = None, ac_mode=None
):
    """The `config_cls` (AOGPTTrainer.Config) of the recipe at `path`, its model `model_registry(flavor)`
    (`flavor` / `ac_mode`: command-line overrides of `model.flavor` / `activation_checkpoint.mode`,
    which 0.3 cannot override after the build). With `root`, relative local data and tokenizer.json
    paths are resolved against it (the recipes name them from the repository root, where 0.2.2 ran)."""
    data = read_recipe(path)
    flavor = flavor or data.get("model", {}).get("flavor", "debugmodel")
    from ...model import FLAVORS

    if flavor not in FLAVORS:
        raise ConfigError(f"model.flavor={flavor!r} is not an aogpt flavor; allowed: {', '.join(FLAVORS)}")
    config = config_cls(model_spec=model_registry(flavor))
    config.training.disable_cuda_graphs = True
    unknown, later = [], []  # later: SPECIAL keys, applied once the sections are in
    for section, values in data.items():
        if not isinstance(values, dict):
            unknown.append(f"{section} (a key outside any section)")
            continue
        if section in ("aogpt", "ema"):
            setattr(config, section, _section(AOGPT if section == "aogpt" else EMA, section, values))
            continue
        if section == "quantize":
            config.quantize = _quantize(values, unknown)
            continue
        for key, value in values.items():
            full = f"{section}.{key}"
            if full in DROPPED:
                continue
            if full in SPECIAL:
                later.append((full, value))
                continue
            target = _target(full, config)
            if target is None:
                unknown.append(f"[{section}] {key}")
                continue
            if root and key in ("dataset_path",) and isinstance(value, str):
                value = _resolve(value, root, data.get(section, {}).get("dataset"))
            _set(config, target, value, full)
    if unknown:
        raise ConfigError(
            f"unknown key{'s' * (len(unknown) > 1)} in {path} (no torchtitan 0.3 counterpart): {', '.join(unknown)}"
        )
    special = dict(later)
    config.activation_checkpoint = _activation_checkpoint(ac_mode or special.get("activation_checkpoint.mode", "none"))
    if root and config.aogpt.tokenizer.endswith(".json") and not os.path.isabs(config.aogpt.tokenizer):
        config.aogpt.tokenizer = os.path.normpath(os.path.join(root, config.aogpt.tokenizer))
    return config


def _resolve(value: str, root: str, dataset: str | None) -> str:
    if dataset not in (None, "local") or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(root, value))


def _flag(arg: str) -> tuple[str, str, str | None]:
    """'--a.b-c=v' -> ('a.b_c', '', 'v'); '--a.no-b' -> ('a.b', 'no_', None)."""
    key, eq, value = arg[2:].partition("=")
    key = key.replace("-", "_")
    section, dot, leaf = key.rpartition(".")
    neg = ""
    if leaf.startswith("no_"):
        neg, leaf = "no_", leaf[3:]
    return f"{section}{dot}{leaf}", neg, value if eq else None


def translate_cli(argv: list[str]) -> tuple[dict, list[str]]:
    """({"job.config_file", "model.flavor", "activation_checkpoint.mode"} found, the other options
    renamed to 0.3 paths). Options 0.3 already spells the same way pass through; tyro names unknown ones."""
    special, out, i = {}, [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            out.append(arg)
            continue
        key, neg, value = _flag(arg)
        if value is None and i < len(argv) and not argv[i].startswith("--"):
            value, i = argv[i], i + 1
            inline = False
        else:
            inline = True
        if key in CLI_SPECIAL and not neg:
            special[key] = value
            continue
        if key in DROPPED:
            continue
        target = KEYS.get(key, key)
        flag = f"--{target.rpartition('.')[0]}{'.' if '.' in target else ''}{neg}{target.rpartition('.')[2]}"
        if value is None:
            out.append(flag)
        else:
            out += [f"{flag}={value}"] if inline else [flag, value]
    return special, out
