"""Checks of a job config's keys and values against its dataclasses, before torchtitan parses it.

torchtitan stops at the first unknown key and names a Python class; its CLI library names no unknown
option in its one-line summary and checks no TOML value's type. These checks name every unknown key
and option (with the nearest valid one) and every wrong type, in one line each. No torchtitan import:
they read dataclasses only. The recipe itself (`--job.config_file`: given once, a file, else the nearest
recipe of train_configs/) is checked before torchtitan is imported, in a second.
"""

import dataclasses
import difflib
import glob
import os
import tomllib
import types
import typing

from ..errors import ConfigError

CUSTOM_CONFIG_MODULE = "aogpt_plugin.training.job_config"  # what recipes set as [job] custom_config_module
AOGPT_SECTIONS = ("aogpt", "ema")  # the sections that module adds (sections.py)


def type_name(hint) -> str:
    """How a message names the type `hint` ("an integer", "a list of a string", "one of 'a', 'b'")."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {type_name(args[0])}" if args else "a list"
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string", type(None): "none"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def matches_type(value, hint) -> bool:
    """Whether a parsed TOML or CLI `value` has the type `hint` (an int is a float; a bool is neither)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is None:
        return True
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(matches_type(value, a) for a in args)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(matches_type(v, args[0]) for v in value))
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
        elif not matches_type(value, hints.get(f.name)):
            raise ConfigError(f"{key}={value!r} has the wrong type; allowed: {type_name(hints[f.name])}")


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
            if not path and key in AOGPT_SECTIONS:
                hint_text = f"; set [job] custom_config_module = {CUSTOM_CONFIG_MODULE!r}"
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


CONFIG_FILE_OPTIONS = ("--job.config_file", "--job.config-file")


def config_files(argv: list[str]) -> list[str]:
    """The recipes `argv` names with `--job.config_file` (either spelling, `=VALUE` or a separate value)."""
    given = []
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key in CONFIG_FILE_OPTIONS:
            given.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return given


RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "train_configs")
FIRST_RECIPE = "train_configs/aogpt_debug.toml"  # the example every message gives: a CPU run of a few minutes


def recipes() -> list[str]:
    """The recipes of train_configs/ (study/ included), as a command line names them from the checkout."""
    found = sorted(glob.glob(os.path.join(RECIPES, "**", "*.toml"), recursive=True))
    return [os.path.relpath(f, os.path.dirname(RECIPES)) for f in found]


def recipes_line() -> str:
    """`aogpt_debug.toml, ...; train_configs/study/ holds 22 more (docs/findings.md)`."""
    names = [r for r in recipes() if os.path.dirname(r) == "train_configs"]
    if not names:
        return "(train_configs/ is in the repository, beside the package)"
    study = len(recipes()) - len(names)
    more = f"; train_configs/study/ holds {study} more (docs/findings.md)" if study else ""
    return ", ".join(os.path.basename(r) for r in names) + more


def usage(program: str) -> str:
    """What `aogpt train` with no arguments prints: what to give, the recipes, one example."""
    return "\n".join(
        [
            f"usage: {program} --job.config_file RECIPE.toml [--SECTION.KEY VALUE ...]",
            f"recipes in train_configs/: {recipes_line()}",
            f"example (a few minutes on a CPU): {program} --job.config_file {FIRST_RECIPE}",
            "aogpt train --help: the entry points and aogpt's own keys; docs/training.md: every key",
        ]
    )


def check_config_file(argv: list[str], program: str) -> None:
    """One recipe per run, and one that exists, checked before torchtitan is imported. torchtitan reads the
    first `--job.config_file` and would ignore a second without a word (a run with settings nobody asked
    for); a missing file is named with the nearest recipe of train_configs/."""
    given = config_files(argv)
    if len(given) > 1:
        raise ConfigError(
            f"--job.config_file is given {len(given)} times ({', '.join(map(repr, given))}); a run reads one recipe: "
            "give one and change its values with --section.key options"
        )
    if not given and not any(a in ("-h", "--help") for a in argv):
        raise ConfigError(
            f"--job.config_file RECIPE.toml is required; recipes in train_configs/: {recipes_line()}; "
            f"e.g. {program} --job.config_file {FIRST_RECIPE}"
        )
    if given and not os.path.isfile(given[0]):
        raise ConfigError(_missing_recipe(given[0]))


def read_recipe(path: str) -> dict:
    """The recipe's TOML as a dict; one line when it is not TOML (or not UTF-8) or cannot be read."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"--job.config_file {path!r} cannot be read: {e.strerror}") from None


def check_own_sections(own_cls, argv: list[str]) -> None:
    """The recipe's `[aogpt]` and `[ema]` keys and values and the `--aogpt.*` / `--ema.*` options, checked
    against `own_cls` (aogpt's own sections, no torch) before torchtitan is imported: a typo there is
    answered in a fraction of a second instead of after torchtitan's import. torchtitan's own sections
    are checked once it is imported (its config classes live there)."""
    if any(a in ("-h", "--help") for a in argv):
        return
    path = config_files(argv)[0]
    data = read_recipe(path)
    own = {key: value for key, value in data.items() if key in AOGPT_SECTIONS}
    unknown = unknown_toml_keys(own_cls, own)
    if unknown:
        raise ConfigError(f"unknown key{'s' * (len(unknown) > 1)} in {path}: {', '.join(unknown)}")
    for section, values in own.items():
        hints = _fields(_fields(own_cls)[section])
        for key, value in values.items() if isinstance(values, dict) else ():
            if not matches_type(value, hints[key]):
                raise ConfigError(
                    f"{section}.{key}={value!r} in {path} has the wrong type; allowed: {type_name(hints[key])}"
                )
    check_cli_args(own_cls, _own_options(argv))


def _own_options(argv: list[str]) -> list[str]:
    """The `--aogpt.*` and `--ema.*` options of `argv`, each with the values that follow it."""
    kept, keep = [], False
    for arg in argv:
        if arg.startswith("--"):
            keep = arg[2:].partition("=")[0].split(".")[0] in AOGPT_SECTIONS
        if keep:
            kept.append(arg)
    return kept


def _missing_recipe(path: str) -> str:
    """The line for a recipe path that is no file: the nearest recipe (as this working folder reaches it)."""
    what = "is a folder" if os.path.isdir(path) else "does not exist"
    checkout = os.path.dirname(RECIPES)
    here = os.path.realpath(os.getcwd()) == os.path.realpath(checkout)
    shown = {r if here else os.path.join(checkout, r): os.path.basename(r) for r in recipes()}
    near = [] if what == "is a folder" else difflib.get_close_matches(path, list(shown), n=1, cutoff=0.8)
    if not near and what != "is a folder":  # the name misspelt under another folder
        by_name = difflib.get_close_matches(os.path.basename(path), list(shown.values()), n=1, cutoff=0.8)
        near = [next(r for r, name in shown.items() if name == by_name[0])] if by_name else []
    listed = f"recipes in train_configs/: {recipes_line()}"
    if near:
        return f"--job.config_file {path!r} {what}; did you mean {near[0]}? {listed}"
    return f"--job.config_file {path!r} {what}; {listed}"


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
                raise ConfigError(f"{flag} needs a value; allowed: {type_name(hint)}")
            value = nxt
            i += 1
            while not _takes_one_value(hint) and i < len(argv) and not argv[i].startswith("--"):
                i += 1
        if not _cli_value_ok(value, hint):
            what = "is not allowed" if typing.get_origin(hint) is typing.Literal else "has the wrong type"
            raise ConfigError(f"--{key}={value!r} {what}; allowed: {type_name(hint)}")
    if len(unknown) == 1:
        flag, near = unknown[0]
        raise ConfigError(f"unknown option {flag}; " + (f"did you mean --{near}?" if near else "see --help"))
    if unknown:
        listed = ", ".join(flag + (f" (did you mean --{near}?)" if near else "") for flag, near in unknown)
        raise ConfigError(f"unknown options {listed}; see --help")
