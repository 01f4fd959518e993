"""The converted model folder: `model.safetensors` + `config.json`, the one format sampling and evaluation read.

`aogpt convert` writes it from a training checkpoint (through `save_model_dir`), tests and baselines
write it from a model in memory (`save_model`), and every reader goes through `read_config` /
`load_model_dir`, which check it before any weight is read. A folder is (re)placed atomically:
written to a temporary sibling and renamed, so a failure never leaves a half-written folder.

config.json:
    format, format_version   "aogpt-converted", 1
    model_args               AOGPTModelArgs as a dict (vocab_size = the tokenizer's real vocabulary)
    tokenizer                the tokenizer the model was trained with (data/tokenizer.py): "gpt2",
                             "symbols:V", or "tokenizer.json", a copy kept inside the folder
    vocab_size               the tokenizer's vocabulary size
    step, weights, source    the checkpoint step, "ema" or "raw", and the step folder it came from
    ...                      anything else the writer adds (e.g. ema_updates)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import torch

from .errors import ConfigError, UserError
from .model import AOGPT, AOGPTModelArgs

FORMAT = "aogpt-converted"
FORMAT_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"
_KNOWN = ("format", "format_version", "model_args", "tokenizer", "vocab_size", "step", "weights", "source")


@dataclass
class ModelDirConfig:
    """config.json, typed."""

    model_args: AOGPTModelArgs
    tokenizer: str = "gpt2"
    step: int | None = None
    weights: str = "raw"
    source: str | None = None
    extra: dict = field(default_factory=dict)

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
        return {**out, **self.extra}

    def build_tokenizer(self, path: str = "model", check_vocab: bool = True):
        """The model's tokenizer (a tokenizer.json is read from the folder). Scoring text needs its
        vocabulary to be the one the model embeds (`check_vocab`); decoding sampled ids only needs
        them to exist in it."""
        from .data.tokenizer import load_tokenizer

        spec = self.tokenizer
        if spec.endswith(".json") and not os.path.isabs(spec):
            spec = os.path.join(path, spec)
        tokenizer = load_tokenizer(spec, key=f"model {path!r}: tokenizer")
        if check_vocab and tokenizer.get_vocab_size() != self.vocab_size:
            raise UserError(
                f"model {path!r} has a {self.vocab_size}-token vocabulary but its tokenizer {tokenizer.name!r} "
                f"has {tokenizer.get_vocab_size()}; it cannot score {tokenizer.name} text"
            )
        return tokenizer


def read_config(path: str) -> ModelDirConfig:
    """config.json of a model folder, checked: format, model args. Reads no weights."""
    if os.path.isfile(path):
        raise UserError(f"model directory {path!r} is a file; give the folder `aogpt convert` wrote")
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


def load_model_dir(path: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> ModelDir:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config = read_config(path)
    try:
        state = load_file(os.path.join(path, "model.safetensors"), device=str(device))
    except (OSError, SafetensorError) as e:
        raise UserError(f"model directory {path!r}: cannot read model.safetensors ({type(e).__name__})") from None
    check_finite(state, f"model directory {path!r}")
    with torch.device("meta"):
        model = AOGPT(config.model_args)
    model.to_empty(device=device)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatch
        raise UserError(
            f"model directory {path!r}: weights do not match config.json ({str(e).splitlines()[-1].strip()})"
        ) from None
    if missing or unexpected:
        raise UserError(
            f"model directory {path!r}: weights do not match config.json "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.to(dtype).eval().requires_grad_(False)
    return ModelDir(model=model, config=config, path=path)


def check_finite(state: dict[str, torch.Tensor], where: str) -> None:
    """No NaN/inf weights are ever written or loaded silently: name the first tensor that has one."""
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise UserError(f"{where}: tensor {name!r} holds {bad} NaN/inf values of {t.numel()}; refusing to use it")


def check_out_dir(out_dir: str) -> None:
    """OUT_DIR can be (re)placed: not a file, and its parent is (or can become) a folder."""
    if os.path.isfile(out_dir):
        raise UserError(f"output directory {out_dir!r} is a file; give a folder path")
    parent = os.path.dirname(os.path.abspath(out_dir))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"output directory {out_dir!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK):
        raise UserError(f"output directory {out_dir!r} cannot be created: {parent!r} is not writable")


_TEMP_PREFIX = ".aogpt-convert-"


def _remove_stale_temporaries(parent: str) -> None:
    """Temporaries of a writer that was killed (its pid is gone) are removed by the next writer."""
    for name in os.listdir(parent):
        if not name.startswith(_TEMP_PREFIX):
            continue
        pid = name[len(_TEMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def save_model_dir(out_dir: str, state: dict[str, torch.Tensor], config: ModelDirConfig) -> None:
    """Atomically (re)place OUT_DIR with model.safetensors + config.json."""
    from safetensors.torch import save_file

    check_out_dir(out_dir)
    check_finite(state, f"writing {out_dir!r}")
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    _remove_stale_temporaries(parent)
    tmp = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-", dir=parent)
    try:
        os.chmod(tmp, 0o755)
        save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(tmp, "model.safetensors"))
        if config.tokenizer.endswith(".json"):  # the folder carries its tokenizer
            shutil.copyfile(config.tokenizer, os.path.join(tmp, TOKENIZER_FILE))
            config = dataclasses.replace(config, tokenizer=TOKENIZER_FILE)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config.to_json(), f, indent=2)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o644)
        if os.path.exists(out_dir):
            old = tmp + ".old"
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
