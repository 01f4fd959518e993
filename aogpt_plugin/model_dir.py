"""The converted model folder: `model.safetensors` + `config.json`, the one format sampling and evaluation read.

`aogpt convert` writes it from a training checkpoint (through `save_model_dir`), tests and baselines
write it from a model in memory (`save_model`), and every reader goes through `read_config` /
`load_model_dir`, which check it before any weight is read. A folder is (re)placed atomically:
written to a temporary sibling and renamed, so a failure never leaves a half-written folder.
Replacing is allowed only for a model folder (nothing a user wrote there is deleted), and only one
process at a time writes a given folder (an fcntl lock `.NAME.aogpt-lock` beside it, released when
the process ends, also by a crash).

`aogpt export` (hf_export.py) writes the same folder plus the files transformers loads it with
(EXPORT_FILES) and more config.json keys (kept in `extra`): it stays a model folder every reader reads.

config.json:
    format, format_version   "aogpt-converted", 1
    model_args               AOGPTModelArgs as a dict (vocab_size = the tokenizer's real vocabulary)
    tokenizer                the tokenizer the model was trained with (data/tokenizer.py): "gpt2",
                             "symbols:V", or "tokenizer.json", a copy kept inside the folder
    vocab_size               the tokenizer's vocabulary size
    step, weights, source    the checkpoint step, "ema" or "raw", and the step folder it came from
    model_sha256             sha256 of model.safetensors, checked on load (folders without it load unchecked)
    ...                      anything else the writer adds (e.g. ema_updates)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field

import torch

from .data.manifest import file_sha256
from .errors import ConfigError, DiskFullError, UserError, disk_full_reason, kind_of, space_note
from .model import AOGPT, AOGPTModelArgs
from .temporaries import acquire_writer_lock, make_temporary, move_into_place, release_writer_lock

FORMAT = "aogpt-converted"
FORMAT_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
# the files `aogpt export` (hf_export.py) adds to make the folder a Hugging Face (trust_remote_code) folder
EXPORT_FILES = ("configuration_aogpt.py", "modeling_aogpt.py", "tokenizer_config.json", "vocab.json", "merges.txt")
_FOLDER_FILES = ("config.json", WEIGHTS_FILE, TOKENIZER_FILE, *EXPORT_FILES)  # all a model folder holds
_KNOWN = (
    "format",
    "format_version",
    "model_args",
    "tokenizer",
    "vocab_size",
    "step",
    "weights",
    "source",
    "model_sha256",
)


@dataclass
class ModelDirConfig:
    """config.json, typed."""

    model_args: AOGPTModelArgs
    tokenizer: str = "gpt2"
    step: int | None = None
    weights: str = "raw"
    source: str | None = None
    extra: dict = field(default_factory=dict)
    model_sha256: str | None = None  # of model.safetensors; set by save_model_dir

    @property
    def vocab_size(self) -> int:
        return self.model_args.vocab_size

    def to_json(self) -> dict:
        out = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model_args": self.model_args.to_dict(),
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "step": self.step,
            "weights": self.weights,
        }
        if self.source is not None:
            out["source"] = self.source
        if self.model_sha256 is not None:
            out["model_sha256"] = self.model_sha256
        return {**out, **self.extra}

    def build_tokenizer(self, path: str = "model", check_vocab: bool = True):
        """The model's tokenizer (a tokenizer.json is read from the folder). Scoring text needs its
        vocabulary to be the one the model embeds (`check_vocab`); decoding sampled ids only needs
        every id the weights can produce to exist in it (a config.json whose tokenizer was changed
        by hand is refused, not sampled into ids beyond it)."""
        from .data.tokenizer import load_tokenizer

        spec = self.tokenizer
        if spec.endswith(".json") and not os.path.isabs(spec):
            spec = os.path.join(path, spec)
        tokenizer = load_tokenizer(spec, key=f"model {path!r}: tokenizer")
        size = tokenizer.get_vocab_size()
        if size < self.vocab_size:
            raise UserError(
                f"model {path!r}: its weights have a {self.vocab_size}-token vocabulary (model_args.vocab_size) but "
                f"its config.json names the tokenizer {tokenizer.name!r} of {size} tokens, which cannot decode the "
                "ids beyond it; restore the tokenizer it was trained with (convert the checkpoint again)"
            )
        if check_vocab and size != self.vocab_size:
            raise UserError(
                f"model {path!r} has a {self.vocab_size}-token vocabulary but its tokenizer {tokenizer.name!r} "
                f"has {size}; it cannot score {tokenizer.name} text"
            )
        return tokenizer


def read_config(path: str) -> ModelDirConfig:
    """config.json of a model folder, checked: format, model args. Reads no weights."""
    if os.path.isfile(path) or kind_of(path):
        raise UserError(
            f"model directory {path!r} is {kind_of(path) or 'a file'}; give the folder `aogpt convert` wrote"
        )
    if not os.path.isdir(path):
        raise UserError(f"model directory {path!r} does not exist (make one with `aogpt convert`)")
    try:
        with open(os.path.join(path, "config.json")) as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"model directory {path!r}: cannot read config.json ({type(e).__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise UserError(f"model directory {path!r}: config.json is not an {FORMAT} config")
    try:
        args = AOGPTModelArgs.from_dict(raw["model_args"])
    except (KeyError, TypeError, ValueError, ConfigError) as e:
        raise UserError(f"model directory {path!r}: bad model_args in config.json ({e})") from None
    return ModelDirConfig(
        model_args=args,
        tokenizer=raw.get("tokenizer", "gpt2"),
        step=raw.get("step"),
        weights=raw.get("weights", "raw"),
        source=raw.get("source"),
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
        model_sha256=raw.get("model_sha256"),
    )


@dataclass
class ModelDir:
    """A loaded model folder: the model (eval mode, no grads) and its config."""

    model: AOGPT
    config: ModelDirConfig
    path: str

    @property
    def args(self) -> AOGPTModelArgs:
        return self.model.model_args

    def tokenizer(self, check_vocab: bool = True):
        return self.config.build_tokenizer(self.path, check_vocab)


def load_model_dir(
    path: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, verify: bool = True
) -> ModelDir:
    """The model of a folder. `verify` checks model.safetensors against the sha256 in config.json
    (a flipped byte may still parse as finite weights); folders written before it was recorded load
    unchecked."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config = read_config(path)
    weights_file = os.path.join(path, WEIGHTS_FILE)
    if verify and config.model_sha256 is not None:
        verify_weights(weights_file, config.model_sha256)
    try:
        state = load_file(weights_file, device=str(device))
    except (OSError, SafetensorError) as e:
        raise UserError(f"model directory {path!r}: cannot read model.safetensors ({type(e).__name__})") from None
    model = model_from_state(state, config.model_args, device, dtype, f"model directory {path!r}", "config.json")
    return ModelDir(model=model, config=config, path=path)


def model_from_state(
    state: dict[str, torch.Tensor],
    args: AOGPTModelArgs,
    device: str | torch.device,
    dtype: torch.dtype,
    where: str,
    args_from: str,
) -> AOGPT:
    """The model (eval mode, no grads) holding `state`, checked: finite, and exactly the parameters
    `args` describe (`where` and `args_from` name the source in the error)."""
    check_finite(state, where)
    with torch.device("meta"):
        model = AOGPT(args)
    model.to_empty(device=device)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatch
        raise UserError(f"{where}: weights do not match {args_from} ({str(e).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise UserError(
            f"{where}: weights do not match {args_from} (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.to(dtype).eval().requires_grad_(False)


def check_finite(state: dict[str, torch.Tensor], where: str) -> None:
    """No NaN/inf weights are ever written or loaded silently: name the first tensor that has one."""
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise UserError(f"{where}: tensor {name!r} holds {bad} NaN/inf values of {t.numel()}; refusing to use it")


def verify_weights(weights_file: str, expected: str) -> None:
    """model.safetensors is the file config.json was written with, byte for byte."""
    try:
        actual = file_sha256(weights_file)
    except OSError as e:
        raise UserError(f"{weights_file!r} cannot be read ({e.strerror or type(e).__name__})") from None
    if actual != expected:
        raise UserError(
            f"{weights_file!r} does not match the sha256 recorded in its config.json (the file is corrupt or was "
            "changed); convert the model again, or pass --no-verify (lm-eval: verify=false) to load it anyway"
        )


def is_model_folder(path: str) -> bool:
    """A folder `aogpt convert` / `save_model` wrote: its config.json is in our format."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("format") == FORMAT


# ---- what a source path is: the one classifier of `load`, `aogpt convert` and `aogpt export` ----------
MODEL_FOLDER, CHECKPOINT = "model folder", "checkpoint"
SOURCE_KINDS = {  # kind: how a message names it
    MODEL_FOLDER: "a model folder (aogpt convert / aogpt export)",
    CHECKPOINT: "a DCP checkpoint folder (.metadata or step-N folders)",
}


def source_kind(path: str, name: str = "path", kinds: tuple[str, ...] = (MODEL_FOLDER, CHECKPOINT)) -> str:
    """MODEL_FOLDER (`aogpt convert` or `aogpt export` wrote it) or CHECKPOINT (a torchtitan DCP folder:
    `.metadata`, a `step-N` folder or a folder of them), or one UserError naming `path` (as `name`: "path",
    "SRC", ...) and the `kinds` the caller reads: a file, nothing, a foreign config.json, neither kind."""
    from .checkpoints import is_checkpoint_folder

    path = os.fspath(path)
    allowed = "allowed: " + " or ".join(SOURCE_KINDS[k] for k in kinds)
    if os.path.isfile(path):
        raise UserError(f"{name} {path!r} is a file; {allowed}")
    if not os.path.isdir(path):
        raise UserError(f"{name} {path!r} does not exist; {allowed}")
    if is_model_folder(path):
        kind = MODEL_FOLDER
    elif os.path.isfile(os.path.join(path, "config.json")):
        raise UserError(f"{name} {path!r}: its config.json is not an aogpt model folder's; {allowed}")
    elif is_checkpoint_folder(path):
        kind = CHECKPOINT
    else:
        raise UserError(
            f"{name} {path!r} is neither kind of folder; {allowed}: it is neither a model folder (no config.json) "
            "nor a checkpoint (no .metadata, no step-N folders)"
        )
    if kind not in kinds:
        raise UserError(f"{name} {path!r} is {SOURCE_KINDS[kind]}; {allowed}")
    return kind


def _check_replaceable(out_dir: str, force: bool) -> None:
    """An existing OUT_DIR is replaced only with --force, and only if it is a model folder holding
    nothing else: replacing deletes the old folder, so no file a user put there may be in it."""
    if not os.path.exists(out_dir):
        return
    if not force:
        raise UserError(f"output directory {out_dir!r} already exists; pass --force to replace it")
    if not is_model_folder(out_dir):
        raise UserError(
            f"output directory {out_dir!r} is not a model folder (no {FORMAT} config.json); --force replaces "
            "only a folder `aogpt convert` wrote, never other files: choose a new folder"
        )
    others = sorted(set(os.listdir(out_dir)) - set(_FOLDER_FILES))
    if others:
        raise UserError(
            f"output directory {out_dir!r} holds {others[0]!r}, which is not part of a model folder; --force "
            "would delete it: move it out or choose a new folder"
        )


_forces: dict[str, bool] = {}  # abs OUT_DIR whose writer lock this process holds -> its --force


def _acquire_lock(out_dir: str, force: bool) -> None:
    """Take OUT_DIR's writer lock (re-entrant in this process): two writers into one folder would each
    replace the other's result; the second is refused instead."""
    acquire_writer_lock(
        out_dir,
        f"output directory {out_dir!r}",
        "two writers would replace each other's folder: wait for it to finish or choose another folder",
    )
    _forces[os.path.abspath(out_dir)] = force


def _release_lock(out_dir: str) -> None:
    _forces.pop(os.path.abspath(out_dir), None)
    release_writer_lock(out_dir)


def check_out_dir(out_dir: str, force: bool = False) -> None:
    """OUT_DIR can be (re)placed, checked before any expensive work: not a file, its parent is (or can
    become) a folder, it does not exist unless `force`, and then it is a model folder. Takes the
    folder's writer lock, held until `save_model_dir` has written it (or the process ends)."""
    if os.path.isfile(out_dir) or kind_of(out_dir):
        raise UserError(f"output directory {out_dir!r} is {kind_of(out_dir) or 'a file'}; give a folder path")
    parent = os.path.dirname(os.path.abspath(out_dir))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"output directory {out_dir!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK):
        raise UserError(f"output directory {out_dir!r} cannot be created: {parent!r} is not writable")
    held = os.path.abspath(out_dir) in _forces
    if parent == os.path.dirname(os.path.abspath(out_dir)):  # else save_model_dir locks once it exists
        _acquire_lock(out_dir, force)
    try:
        _check_replaceable(out_dir, force)
    except UserError:
        if not held:  # a refused folder is not kept locked
            _release_lock(out_dir)
        raise


_TEMP_PREFIX = ".aogpt-convert-"


def save_model_dir(
    out_dir: str, state: dict[str, torch.Tensor], config: ModelDirConfig, files: dict[str, bytes] | None = None
) -> None:
    """Atomically (re)place OUT_DIR with model.safetensors + config.json (recording the weights' sha256),
    and `files` (named in EXPORT_FILES, so a later --force may replace them), under OUT_DIR's writer
    lock. An existing OUT_DIR is replaced only if it is a model folder; after
    `check_out_dir(out_dir, force=False)` in this process, not at all."""
    from safetensors.torch import save_file

    files = files or {}
    stray = sorted(set(files) - set(EXPORT_FILES))
    if stray:
        raise ValueError(f"save_model_dir: {stray} are not model folder files (model_dir.EXPORT_FILES)")

    key = os.path.abspath(out_dir)
    force = _forces.get(key, True)
    parent = os.path.dirname(key) or "."
    try:
        check_out_dir(out_dir, force)
        check_finite(state, f"writing {out_dir!r}")
        os.makedirs(parent, exist_ok=True)
        _acquire_lock(out_dir, force)
        _check_replaceable(out_dir, force)  # again, under the lock
        tmp = make_temporary(parent, _TEMP_PREFIX)
        try:
            os.chmod(tmp, 0o755)
            weights_file = os.path.join(tmp, WEIGHTS_FILE)
            save_file({k: v.contiguous() for k, v in state.items()}, weights_file)
            config = dataclasses.replace(config, model_sha256=file_sha256(weights_file))
            if config.tokenizer.endswith(".json"):  # the folder carries its tokenizer
                shutil.copyfile(config.tokenizer, os.path.join(tmp, TOKENIZER_FILE))
                config = dataclasses.replace(config, tokenizer=TOKENIZER_FILE)
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(config.to_json(), f, indent=2)
            for name, data in files.items():
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
            for name in os.listdir(tmp):
                os.chmod(os.path.join(tmp, name), 0o644)
            move_into_place(tmp, out_dir)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            kept = (
                f"the existing {out_dir!r} is kept as it was" if os.path.exists(out_dir) else "nothing was left behind"
            )
            if isinstance(e, KeyboardInterrupt):  # Ctrl-C / SIGTERM: the command's one line says what is left
                e.detail = getattr(e, "detail", None) or f"{out_dir!r} was not written ({kept})"
                raise
            needed = sum(t.numel() * t.element_size() for t in state.values()) + sum(map(len, files.values()))
            reason = disk_full_reason(e, parent, needed) if isinstance(e, Exception) else None
            if reason is None:
                raise
            raise DiskFullError(
                f"the disk is full: writing {out_dir!r} failed ({reason}); {space_note(parent, needed)}; {kept}"
            ) from None
    finally:
        _release_lock(out_dir)


def save_model(model: AOGPT, out_dir: str, tokenizer: str = "gpt2", **extra) -> ModelDirConfig:
    """Write a model held in memory as a model folder (tests, baselines, imports)."""
    config = ModelDirConfig(
        model_args=model.model_args,
        tokenizer=tokenizer,
        step=extra.pop("step", None),
        weights=extra.pop("weights", "raw"),
        extra=extra,
    )
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items() if not k.startswith("ema.")}
    save_model_dir(out_dir, state, config)
    return config
