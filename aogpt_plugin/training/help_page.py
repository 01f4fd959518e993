"""`aogpt train --help`: aogpt's own page, at once. torchtitan's help takes half a minute (it imports
torch and torchtitan) and runs to ~900 lines with aogpt's `[aogpt]` / `[ema]` keys at the end, and only
with a `--job.config_file`; a newcomer needs the entry points, the recipes and aogpt's keys. Nothing
here imports torch or torchtitan. The keys, defaults and help lines come from the section dataclasses
(sections.py), whose field docstrings are also the config reference in docs/training.md."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from ..errors import ConfigError
from .config_checks import recipes_line
from .sections import AOGPT, EMA
from .versions import check_torchtitan_installed, torchtitan_version


def field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass (what tyro shows in --help), by field name."""
    tree = ast.parse(inspect.getsource(cls))
    body, docs = tree.body[0].body, {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = str(after.value.value).strip()
    return docs


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _keys(cls) -> list[str]:
    docs = field_docs(cls)
    rows = [(f"{f.name} = {_toml(f.default)}", docs.get(f.name, "").splitlines()[0]) for f in dataclasses.fields(cls)]
    width = max(len(key) for key, _ in rows)
    return [f"  {key:{width}s}  {text}" for key, text in rows]


def help_page() -> str:
    """The page; without torchtitan it says how to install it first (training needs it, the page does not)."""
    missing = []
    try:
        check_torchtitan_installed()
        installed = f"torchtitan {torchtitan_version()} is installed"
    except ConfigError as e:
        installed, missing = "torchtitan is not installed", [f"note: {e}", ""]
    lines = [
        "usage: aogpt train --job.config_file RECIPE.toml [--SECTION.KEY VALUE ...]",
        "",
        *missing,
        f"Trains AO-GPT with torchtitan ({installed}; 0.2.2 and 0.3 both work). Every torchtitan option",
        "works as in torchtitan (--training.steps 100, --checkpoint.enable); aogpt adds [aogpt] and [ema].",
        "",
        "entry points (the same training):",
        "  aogpt train --job.config_file train_configs/aogpt_debug.toml            this command (= python -m aogpt_plugin.train)",
        "  torchrun --nproc_per_node=8 -m aogpt_plugin.train --job.config_file ...   several GPUs (scripts/slurm/ for nodes)",
        "  torchrun -m torchtitan.train --job.config_file RECIPE.toml             stock torchtitan 0.2.2",
        "  torchrun -m torchtitan.train --module aogpt_plugin --config aogpt_debug  stock torchtitan 0.3 (a config per recipe)",
        "",
        "recipes (train_configs/):",
        "  " + recipes_line(),
        "",
        "[aogpt] (the any-order options) and [ema] (the average of the weights), as TOML keys with their defaults;",
        "on the command line --aogpt.p-l2r 0.5 (hyphens), booleans --ema.enable / --ema.no-enable:",
        "[aogpt]",
        *_keys(AOGPT),
        "[ema]",
        *_keys(EMA),
        "",
        "torchtitan's own options: aogpt train --job.config_file RECIPE.toml --help (its full help, slower).",
        "Every key with its type and allowed values: docs/training.md (config reference).",
    ]
    return "\n".join(lines)
