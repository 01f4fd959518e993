"""Load a converted model folder (model.safetensors + config.json) for sampling or evaluation."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

from .convert import FORMAT, FORMAT_VERSION, write_model_dir
from .errors import UserError
from .model import AOGPT, AOGPTModelArgs


@dataclass
class Pretrained:
    model: AOGPT
    config: dict
    path: str

    @property
    def args(self) -> AOGPTModelArgs:
        return self.model.model_args

    def tokenizer(self):
        from .data.tokenizer import TiktokenTokenizer

        return TiktokenTokenizer(self.config.get("tokenizer", "gpt2"))


def read_config(path: str) -> dict:
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        raise UserError(f"model directory {path!r} does not exist (make one with `aogpt convert`)")
    try:
        with open(cfg_path) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"model directory {path!r}: cannot read config.json ({type(e).__name__})") from None
    if config.get("format") != FORMAT:
        raise UserError(f"model directory {path!r}: config.json is not an {FORMAT} config")
    return config


def load_pretrained(path: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Pretrained:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config = read_config(path)
    try:
        args = AOGPTModelArgs.from_dict(config["model_args"])
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"model directory {path!r}: bad model_args in config.json ({e})") from None
    try:
        state = load_file(os.path.join(path, "model.safetensors"), device=str(device))
    except (OSError, SafetensorError) as e:
        raise UserError(f"model directory {path!r}: cannot read model.safetensors ({type(e).__name__})") from None
    with torch.device("meta"):
        model = AOGPT(args)
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
    return Pretrained(model=model, config=config, path=path)


def save_pretrained(model: AOGPT, out_dir: str, tokenizer: str = "gpt2", **extra) -> dict:
    """Write a model held in memory in the converted format (tests, baselines, imports)."""
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_args": model.model_args.to_dict(),
        "tokenizer": tokenizer,
        "vocab_size": model.model_args.vocab_size,
        "step": extra.pop("step", None),
        "weights": extra.pop("weights", "raw"),
        **extra,
    }
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items() if not k.startswith("ema.")}
    write_model_dir(out_dir, state, config)
    return config
