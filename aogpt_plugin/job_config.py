"""The TOML sections aogpt adds to torchtitan's JobConfig (`[job] custom_config_module`).

`[aogpt]` holds the any-order options, `[ema]` the weight averaging. Each value is checked when
the section is built, i.e. while torchtitan parses the TOML and the CLI, before any process group
exists; a bad value raises ConfigError with one line naming key, value and what is allowed.
"""

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field

from .data.tokenizer import check_tokenizer_spec
from .errors import ConfigError
from .model.args import check_conditioning
from .orders import canonical_order, check_p_l2r


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


def _fields(cls) -> dict:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


def _options(cls, prefix: str = "") -> dict:
    """Every leaf of a (nested) config dataclass by its dotted CLI name, e.g. 'quantize.linear.float8.emulate'."""
    out = {}
    for name, hint in _fields(cls).items():
        if dataclasses.is_dataclass(hint):
            out.update(_options(hint, f"{prefix}{name}."))
        else:
            out[prefix + name] = hint
    return out


def _nearest(name: str, names) -> str | None:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_toml_keys(config_cls, data: dict, path: str = "") -> list[str]:
    """Every key of a parsed TOML file that `config_cls` lacks, as '[section] key (did you mean ...?)'.
    torchtitan stops at the first one and names a Python class instead of the TOML section."""
    known, found = _fields(config_cls), []
    for key, value in data.items():
        full, hint = f"{path}.{key}" if path else key, known.get(key)
        if hint is not None:
            if dataclasses.is_dataclass(hint) and isinstance(value, dict):
                found.extend(unknown_toml_keys(hint, value, full))
            elif dataclasses.is_dataclass(hint):
                found.append(f"{full} = {value!r} (a section: write [{full}] and its keys)")
            continue
        near = _nearest(key, known)
        if isinstance(value, dict):
            if not path and key in _fields(JobConfig):
                hint_text = f"; set [job] custom_config_module = {__name__!r}"
            else:
                hint_text = f"; did you mean [{f'{path}.' if path else ''}{near}]?" if near else ""
            found.append(f"[{full}] (unknown section{hint_text})")
        elif path:
            found.append(f"[{path}] {key}" + (f" (did you mean {near}?)" if near else ""))
        else:
            found.append(f"{key} (a key outside any section)")
    return found


def _cli_value_ok(text: str, hint) -> bool:
    """Whether tyro can read `text` as `hint` (checked only for the scalar types the config uses)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return text in [str(a) for a in args]
    if origin in (typing.Union, types.UnionType):
        return any(text == "None" if a is type(None) else _cli_value_ok(text, a) for a in args)
    for kind in (int, float):
        if hint is kind:
            try:
                kind(text)
            except ValueError:
                return False
    return True


def _takes_one_value(hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return all(_takes_one_value(a) for a in args)
    return hint == list[str] or origin not in (list, tuple, dict)  # torchtitan reads list[str] as 'a,b,c'


def check_cli_args(config_cls, argv: list[str]) -> None:
    """Every `--section.key` of `argv` exists in `config_cls` and its value has the key's type.
    All unknown options are named at once, each with the nearest valid one; tyro names none of them
    in its one-line summary and cuts a bad value off."""
    options, unknown, i = _options(config_cls), [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("-h", "--help"):
            return
        if not arg.startswith("--"):
            continue  # a stray value: tyro reports it
        flag, eq, value = arg.partition("=")
        key = flag[2:].replace("-", "_")
        section, _, last = key.rpartition(".")
        negated = key not in options and last.startswith("no_") and options.get(f"{section}.{last[3:]}") is bool
        hint = bool if negated else options.get(key)
        nxt = argv[i] if i < len(argv) and not argv[i].startswith("--") else None
        if hint is None:
            near = _nearest(last, [k.rpartition(".")[2] for k in options if k.rpartition(".")[0] == section])
            near = f"{section}.{near}" if near else _nearest(key, options)
            unknown.append((flag, near))
            i += 1 if nxt is not None and not eq else 0  # skip its value
            continue
        if hint is bool:
            if eq or nxt is not None:
                name = key if not negated else f"{section}.{last[3:]}"
                given = value if eq else nxt
                raise ConfigError(
                    f"{flag} is a flag and takes no value (got {given!r}); "
                    f"allowed: --{name} or --{section}.no_{name.rpartition('.')[2]}"
                )
            continue
        if not eq:
            if nxt is None:
                raise ConfigError(f"{flag} needs a value; allowed: {_type_name(hint)}")
            value = nxt
            i += 1
            while not _takes_one_value(hint) and i < len(argv) and not argv[i].startswith("--"):
                i += 1
        if not _cli_value_ok(value, hint):
            what = "is not allowed" if typing.get_origin(hint) is typing.Literal else "has the wrong type"
            raise ConfigError(f"--{key}={value!r} {what}; allowed: {_type_name(hint)}")
    if len(unknown) == 1:
        flag, near = unknown[0]
        raise ConfigError(f"unknown option {flag}; " + (f"did you mean --{near}?" if near else "see --help"))
    if unknown:
        listed = ", ".join(flag + (f" (did you mean --{near}?)" if near else "") for flag, near in unknown)
        raise ConfigError(f"unknown options {listed}; see --help")


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
    """Stop on a NaN/inf loss or gradient (before the optimizer step) or weight (after it): no checkpoint holds bad weights."""

    def __post_init__(self) -> None:
        check_types(self, "aogpt")
        check_conditioning(self.conditioning)
        self.order = canonical_order(self.order)  # aliases spelled canonically
        check_p_l2r(self.p_l2r)
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
