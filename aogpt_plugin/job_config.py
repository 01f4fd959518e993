"""The TOML sections aogpt adds to torchtitan's JobConfig (`[job] custom_config_module`).

`[aogpt]` holds the any-order options, `[ema]` the weight averaging. Each value is checked when
the section is built, i.e. while torchtitan parses the TOML and the CLI, before any process group
exists; a bad value raises ConfigError with one line naming key, value and what is allowed.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass, field

from .data.tokenizer import check_tokenizer_spec
from .errors import ConfigError
from .model.args import CONDITIONINGS
from .orders import parse_order_kind


def _type_name(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {_type_name(args[0])}" if args else "a list"
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string", type(None): "none"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _matches(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is None:
        return True
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def check_types(section, name: str) -> None:
    """Every value has its field's type: torchtitan's parser checks CLI values but not TOML ones
    (`p_l2r = "abc"` would otherwise fail later, on every rank, with a traceback)."""
    hints = typing.get_type_hints(type(section))
    for f in dataclasses.fields(section):
        value, key = getattr(section, f.name), f"{name}.{f.name}" if name else f.name
        if dataclasses.is_dataclass(value):
            check_types(value, key)
        elif not _matches(value, hints.get(f.name)):
            raise ConfigError(f"{key}={value!r} has the wrong type; allowed: {_type_name(hints[f.name])}")


@dataclass
class AOGPT:
    conditioning: str = "adaln"
    """How slot j learns its target position: adaln (AO-GPT), concat (sigma-GPT), none (AR GPT)."""

    target_pe_dim: int = 128
    """Width of the target-position table that feeds adaLN (the paper uses 128)."""

    order: str = "mixture"
    """Order distribution: mixture | random | l2r | fixed_random | blockwise:K (orders.py)."""

    p_l2r: float = 0.1
    """With order=mixture: probability that a sequence is read left to right (paper: 0.1)."""

    order_seed: int = 0
    """Seed of the order streams (mixed with the data-parallel rank and the sequence index)."""

    shuffle_windows: int = 0
    """Windows held in a shuffle buffer before they are batched (0: torchtitan's consecutive windows).
    torchtitan packs documents into consecutive windows, so a small batch holds one or two articles;
    a buffer of K windows makes each batch a random draw from K (the small-scale study needs it)."""

    tokenizer: str = "gpt2"
    """gpt2 (tiktoken, the paper's), a tokenizer.json path, or symbols:V (data/tokenizer.py); EOS ends every document."""

    val_orders: int = 2
    """Validation: fixed random orders per window for the any-order loss (left to right is always added)."""

    val_order_seed: int = 1234
    """Validation: seed of those fixed orders, so every validation scores the same (window, order) pairs."""

    nan_check: bool = True
    """Stop before the optimizer step when a loss is NaN/inf, so no later checkpoint holds bad weights."""

    def __post_init__(self) -> None:
        check_types(self, "aogpt")
        if self.conditioning not in CONDITIONINGS:
            raise ConfigError(
                f"aogpt.conditioning={self.conditioning!r} is not supported; allowed: {', '.join(CONDITIONINGS)}"
            )
        kind, block = parse_order_kind(self.order)
        self.order = f"blockwise:{block}" if kind == "blockwise" else kind  # aliases spelled canonically
        if not 0.0 <= self.p_l2r <= 1.0:
            raise ConfigError(f"aogpt.p_l2r={self.p_l2r} is outside the allowed range [0, 1]")
        if self.target_pe_dim < 1:
            raise ConfigError(f"aogpt.target_pe_dim={self.target_pe_dim} must be >= 1")
        check_tokenizer_spec(self.tokenizer, must_exist=False)  # the file: preflight, once CLI overrides are in
        if self.val_orders < 0:
            raise ConfigError(f"aogpt.val_orders={self.val_orders} must be >= 0")
        if self.shuffle_windows < 0:
            raise ConfigError(f"aogpt.shuffle_windows={self.shuffle_windows} is not allowed; allowed: 0 (off) or >= 1")


@dataclass
class EMA:
    enable: bool = True
    """Keep an exponential moving average of the weights (saved in checkpoints as `ema.<param>`)."""

    decay: float = 0.9999
    """EMA decay (paper: 0.9999)."""

    warmup: bool = True
    """Use min(decay, (1+k)/(10+k)) at update k, as torch_ema and the authors do."""

    validate: bool = True
    """Also report validation losses of the EMA weights."""

    def __post_init__(self) -> None:
        check_types(self, "ema")
        if not 0.0 <= self.decay < 1.0:
            raise ConfigError(f"ema.decay={self.decay} is outside the allowed range [0, 1)")


@dataclass
class JobConfig:
    aogpt: AOGPT = field(default_factory=AOGPT)
    ema: EMA = field(default_factory=EMA)
