"""Argument checks shared by `aogpt eval ppl` and `aogpt eval genppl`: fail in one line, before loading."""

from __future__ import annotations

import sys

import torch

from ..errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def add_runtime_args(p) -> None:
    """Where and how a scoring command runs, and how it reports: the same four flags on each command."""
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")


def require_at_least(flag: str, value: int | None, low: int, meaning: str) -> None:
    if value is not None and value < low:
        raise UserError(f"{flag} {value}: {meaning} must be >= {low}")


def resolve_device(name: str | None) -> torch.device:
    """The given device, else CUDA when present, else the CPU (the sampler's rule)."""
    from ..sampler.device import resolve_device as resolve

    return resolve(name or "auto")


def check_tokenizer_matches(model_dir: str, tokenizer, vocab_size: int) -> None:
    if tokenizer.get_vocab_size() != vocab_size:
        raise UserError(
            f"model {model_dir!r} has a {vocab_size}-token vocabulary but its tokenizer {tokenizer.name!r} "
            f"has {tokenizer.get_vocab_size()}; it cannot score {tokenizer.name} text"
        )


class Reporter:
    """Human-readable lines: stdout normally, stderr under --json so stdout holds only the JSON object."""

    def __init__(self, json_mode: bool):
        self.stream = sys.stderr if json_mode else sys.stdout

    def __call__(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
