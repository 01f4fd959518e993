"""The generated parts of docs/training.md: the config reference and the multi-node batch table.

    python scripts/config_reference.py            # print both blocks
    python scripts/config_reference.py --write    # replace them in docs/training.md (between the markers)
    python scripts/config_reference.py --check    # exit 1 with one line when docs/training.md is stale

Everything comes from code, nothing is typed twice:
* `[aogpt]` / `[ema]` keys: name, type and default from the dataclasses in aogpt_plugin/training/sections.py,
  the help text from each field's docstring (its first line), the allowed values from the checks the
  section runs when it is built (a deliberately bad value is tried; the `allowed` part of the error
  it raises is quoted; a key that accepts it shows its type).
* Recipe keys: every `section.key` that a train_configs/*.toml sets, one column per recipe, and the
  default that applies when a recipe does not set it (torchtitan 0.2.2's, read from the installed
  torchtitan/config/job_config.py without importing torchtitan, or aogpt's).
* The batch table: the arithmetic lines that `scripts/slurm/aogpt.sbatch --dry-run` prints.
No clock, no host name, no randomness: the same checkout gives the same text.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "training.md"
RECIPES = "train_configs/*.toml"
SBATCH = "scripts/slurm/aogpt.sbatch"
BLOCKS = {
    "config-reference": "<!-- config-reference:start -->",
    "batch-table": "<!-- batch-table:start -->",
}
# The GPU counts of the multi-node table: (nodes, GPUs per node).
LAYOUTS = [(1, 1), (1, 8), (2, 8), (4, 8), (8, 8)]


def end_marker(name: str) -> str:
    return f"<!-- {name}:end -->"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if value is None:
        return "unset"
    return repr(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def code(value) -> str:
    return f"`{cell(toml_value(value))}`"


# ---- [aogpt] and [ema] -------------------------------------------------------------------------


BAD_VALUES = {str: ["?"], int: [-1], float: [-1.0, 2.0], bool: []}


def allowed_values(cls, name: str, hint) -> str:
    """What the section's own checks allow, in the words of the error they raise for a bad value."""
    from aogpt_plugin.errors import ConfigError

    found = []
    for bad in BAD_VALUES.get(hint, []):
        try:
            cls(**{name: bad})
        except ConfigError as e:
            m = re.search(r"(?:allowed range |allowed: |must be )(.*)$", str(e))
            if m and m.group(1) not in found:
                found.append(m.group(1))
    if found:
        return "; ".join(found)
    return {bool: "true, false", int: "any integer", float: "any number", str: "any string"}.get(hint, "")


def section_rows(cls, section: str) -> list[str]:
    from aogpt_plugin.training.help_page import field_docs

    hints, docs, rows = typing.get_type_hints(cls), field_docs(cls), []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.name not in docs:
            raise SystemExit(
                f"error: {cls.__name__}.{f.name} has no docstring; add one in aogpt_plugin/training/sections.py"
            )
        helptext = docs[f.name].splitlines()[0]
        allowed = allowed_values(cls, f.name, hint)
        rows.append(
            f"| `{section}.{f.name}` | {hint.__name__} | {code(f.default)} | {cell(allowed)} | {cell(helptext)} |"
        )
    return rows


def aogpt_table() -> list[str]:
    from aogpt_plugin.training.sections import AOGPT, EMA

    lines = ["| key | type | default | allowed | help |", "|---|---|---|---|---|"]
    return lines + section_rows(AOGPT, "aogpt") + section_rows(EMA, "ema")


# ---- recipe keys ---------------------------------------------------------------------------------


def titan_defaults() -> dict[str, object]:
    """torchtitan's JobConfig defaults by dotted key, from its source (importing torchtitan needs a GPU
    stack or training/titan022/launch.py's CPU patches, and seconds; the dataclasses are plain enough to read)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: torchtitan is not installed in this python (use the project's .venv)")
    source = Path(spec.submodule_search_locations[0]) / "config" / "job_config.py"
    classes = {n.name: n for n in ast.parse(source.read_text()).body if isinstance(n, ast.ClassDef)}
    out: dict[str, object] = {}

    def value_of(node):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "field":
            kw = {k.arg: k.value for k in node.keywords}
            if "default" in kw:
                return value_of(kw["default"])
            factory = kw.get("default_factory")
            if isinstance(factory, ast.Lambda):
                return value_of(factory.body)
            if isinstance(factory, ast.Name):
                return {"list": [], "dict": {}}.get(factory.id, factory.id)
        try:
            return ast.literal_eval(node)
        except ValueError:
            return ast.unparse(node)

    def walk(cls_name: str, prefix: str) -> None:
        for node in classes[cls_name].body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            key, ann = prefix + node.target.id, ast.unparse(node.annotation)
            if ann in classes:
                walk(ann, key + ".")
            elif node.value is not None:
                out[key] = value_of(node.value)

    walk("JobConfig", "")
    return out


def aogpt_defaults() -> dict[str, object]:
    from aogpt_plugin.training.job_config import JobConfig

    return {
        f"{s.name}.{f.name}": f.default
        for s in dataclasses.fields(JobConfig)
        for f in dataclasses.fields(s.default_factory)
    }


def flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def recipe_table() -> list[str]:
    paths = sorted(ROOT.glob(RECIPES))
    recipes = {p.stem: flatten(tomllib.loads(p.read_text())) for p in paths}
    defaults = {**titan_defaults(), **aogpt_defaults()}
    sections: dict[str, list[str]] = {}  # section -> keys, both in order of first appearance
    for values in recipes.values():
        for key in values:
            section = key.rpartition(".")[0]
            if key not in sections.setdefault(section, []):
                sections[section].append(key)
    head = "| key | default | " + " | ".join(f"`{name}`" for name in recipes) + " |"
    lines = [head, "|---|---|" + "---|" * len(recipes)]
    for keys in sections.values():
        for key in keys:
            default = code(defaults[key]) if key in defaults else "(none)"
            cells = [code(values[key]) if key in values else "—" for values in recipes.values()]
            lines.append(f"| `{key}` | {default} | " + " | ".join(cells) + " |")
    return lines


def config_reference() -> str:
    glob = f"`{RECIPES}`"
    return "\n".join(
        [
            "Generated by `python scripts/config_reference.py --write` from `aogpt_plugin/training/sections.py` (types,",
            "defaults, the first line of each field's docstring, and the `allowed` text of the error each check",
            "raises) and from the recipes; `tests/scripts/test_config_reference.py` fails when this is stale.",
            "",
            "### `[aogpt]` and `[ema]`",
            "",
            *aogpt_table(),
            "",
            f"### What each recipe sets ({glob})",
            "",
            "`—`: not set, the default applies (torchtitan 0.2.2's, from its `config/job_config.py`, or",
            "aogpt's). Every key is also a command-line override: `--section.key VALUE`.",
            "",
            *recipe_table(),
        ]
    )


# ---- multi-node batch table ------------------------------------------------------------------------


def dry_run(recipe: str, nodes: int, gpus: int) -> dict[str, str]:
    """The arithmetic `aogpt.sbatch --dry-run` prints, independent of any SLURM job around us."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RDZV_", "DRY_RUN"))}
    env |= {"RDZV_HOST": "HOST", "PYTHON": sys.executable}
    cmd = ["bash", SBATCH, "--dry-run", "--nnodes", str(nodes), "--gpus-per-node", str(gpus), recipe]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip() or f"error: {' '.join(cmd)} exited {proc.returncode}")
    m = re.search(
        r"^batch: global_batch_size (\d+) = local_batch_size (\d+) x (\d+) ranks x (\d+) gradient accumulation "
        r"steps; \d+ x seq_len (\d+) = (\d+) tokens/step$",
        proc.stdout,
        re.M,
    )
    if m is None:
        raise SystemExit(f"error: no batch line in the output of {' '.join(cmd)}")
    g, local, ranks, accum, seq, tokens = m.groups()
    extra = re.search(r"--training\.local_batch_size \d+", proc.stdout.split("per node", 1)[1].splitlines()[0])
    return {
        "global": g,
        "local": local,
        "accum": accum,
        "seq": seq,
        "tokens": f"{int(tokens):,}",
        "added": f"`{extra.group(0)}`" if extra else "—",
    }


EXAMPLE_ENV = {"SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-08]"}
EXAMPLE_ARGS = ["train_configs/aogpt_small.toml", "--job.dump_folder", "/shared/runs/aogpt_small"]


def example_dry_run() -> str:
    """A dry run as a SLURM job of 8 nodes sees it, with the command that prints it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RDZV_", "DRY_RUN"))}
    env |= {**EXAMPLE_ENV, "DRY_RUN": "1", "PYTHON": sys.executable, "SCONTROL": "/nonexistent"}
    proc = subprocess.run(["bash", SBATCH, *EXAMPLE_ARGS], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip() or f"error: the example dry run exited {proc.returncode}")
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in EXAMPLE_ENV.items())
    return f"```\n$ DRY_RUN=1 {shown} bash {SBATCH} {shlex.join(EXAMPLE_ARGS)}\n{proc.stdout.rstrip()}\n```"


def batch_table() -> str:
    recipes = []
    for path in sorted(ROOT.glob(RECIPES)):
        if tomllib.loads(path.read_text()).get("training", {}).get("global_batch_size", -1) > 0:
            recipes.append(str(path.relative_to(ROOT)))
    lines = [
        f"Generated by `python scripts/config_reference.py --write` from `{SBATCH} --dry-run --nnodes N",
        "--gpus-per-node G RECIPE` (its `batch:` line) for the recipes that set `global_batch_size`.",
        "",
        "| GPUs | nodes x GPUs/node | recipes | global_batch_size | local_batch_size | gradient accumulation steps "
        "| tokens/step | the script adds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for nodes, gpus in LAYOUTS:
        groups: dict[tuple, list[str]] = {}
        for recipe in recipes:
            row = dry_run(recipe, nodes, gpus)
            groups.setdefault(tuple(row.items()), []).append(f"`{Path(recipe).stem}`")
        for row_items, names in groups.items():
            r = dict(row_items)
            lines.append(
                f"| {nodes * gpus} | {nodes} x {gpus} | {', '.join(names)} | {r['global']} | {r['local']} "
                f"| {r['accum']} | {r['tokens']} ({r['global']} x {r['seq']}) | {r['added']} |"
            )
    lines += ["", "What the script prints (the same arithmetic, and the command each node runs):", ""]
    return "\n".join(lines) + "\n" + example_dry_run()


# ---- the document ----------------------------------------------------------------------------------


def replace_block(text: str, name: str, body: str) -> str:
    start, end = BLOCKS[name], end_marker(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"needs exactly one {start} ... {end} pair")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def render(text: str) -> str:
    text = replace_block(text, "config-reference", config_reference())
    return replace_block(text, "batch-table", batch_table())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the generated blocks in the doc")
    mode.add_argument("--check", action="store_true", help="exit 1 when the doc's blocks are stale")
    parser.add_argument("--doc", type=Path, default=DOC, help="the document (default: docs/training.md)")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print(config_reference() + "\n\n" + batch_table())
        return 0
    if not args.doc.is_file():
        print(f"error: {args.doc}: no such file", file=sys.stderr)
        return 2
    text = args.doc.read_text()
    try:
        new = render(text)
    except ValueError as e:
        print(f"error: {args.doc}: {e}", file=sys.stderr)
        return 2
    if args.write:
        if new != text:
            args.doc.write_text(new)
        return 0
    if new != text:
        print(
            f"error: {args.doc} is stale (config reference or batch table); run: python scripts/config_reference.py --write",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
