"""The run's settings under torchtitan 0.3: one object built from the final config and held by the
components, equal to what 0.2.2 builds from the same recipe; no 0.3 Config restates a default the
shared sections and model args own, and the glue builds no look-alike namespaces. The source checks
read the files, so they run on either version."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess

import pytest
from conftest import ROOT

from aogpt_plugin.model.args import AOGPTModelArgs
from aogpt_plugin.training.sections import AOGPT, EMA

from .conftest import needs_titan03

GLUE = ROOT / "aogpt_plugin" / "training" / "titan03"
OWNERS = {"aogpt": AOGPT(), "ema": EMA(), "model args": AOGPTModelArgs()}  # the shared owners of defaults


def _shared_defaults() -> tuple[dict[str, str], dict[str, str]]:
    """({field name, also as `<section>_<name>`: its owner}, {a string default: its owner's key})."""
    names, strings = {}, {}
    for owner, instance in OWNERS.items():
        for f in dataclasses.fields(instance):
            key = f"{owner}.{f.name}"
            names[f.name] = names[f"{owner.split()[0]}_{f.name}"] = key
            value = getattr(instance, f.name)
            if isinstance(value, str):
                strings[value] = key
    return names, strings


def _literal(value) -> bool:
    return isinstance(value, ast.Constant) or (
        isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant)
    )


def restated_defaults(source: str, where: str) -> list[str]:
    """Every field of a `Config` class in `source` with a literal default for a shared setting: by its name
    (a copy of `[aogpt] order` is `order`, `ema_decay` ...) or by a string the shared owners hold."""
    names, strings = _shared_defaults()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == "Config"):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and _literal(item.value)):
                continue
            name = item.target.id
            if name in names:
                found.append(f"{where}: Config.{name} restates {names[name]}")
            elif isinstance(item.value, ast.Constant) and item.value.value in strings:
                found.append(f"{where}: Config.{name} = {item.value.value!r} restates {strings[item.value.value]}")
    return found


def test_no_0_3_config_restates_a_shared_default():
    found = [line for path in sorted(GLUE.glob("*.py")) for line in restated_defaults(path.read_text(), path.name)]
    assert found == []


def test_the_check_finds_restated_defaults():
    """What 0.3's Configs held before they derived their defaults: each is named."""
    source = """
class AOGPTDataLoader:
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "local"
        order: str = "mixture"
        infinite: bool = True
class AOTokenizer:
    class Config(BaseTokenizer.Config):
        spec: str = "gpt2"
class AOGPTModel:
    class Config(BaseModel.Config):
        flavor: str
        dim: int = 768
        ema_decay: float = 0.9999
class AOGPTTrainer:
    class Config(Trainer.Config):
        tokenizer: AOTokenizer.Config = field(default_factory=AOTokenizer.Config)
        val_order_seed: int = -1
"""
    assert restated_defaults(source, "old.py") == [
        "old.py: Config.order restates aogpt.order",
        "old.py: Config.spec = 'gpt2' restates aogpt.tokenizer",
        "old.py: Config.dim restates model args.dim",
        "old.py: Config.ema_decay restates ema.decay",
        "old.py: Config.val_order_seed restates aogpt.val_order_seed",
    ]


def test_the_0_3_glue_builds_no_look_alike_views():
    """Settings are never copied into namespaces or ad-hoc classes (`SimpleNamespace`, `type(...)`)."""
    for path in sorted(GLUE.glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "SimpleNamespace" not in names, path.name
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        assert not [c for c in calls if c.func.id == "type" and len(c.args) == 3], path.name


@needs_titan03
def test_run_settings_read_the_final_config_under_the_recipes_names(titan03_on_cpu):
    from torchtitan.config import ConfigManager

    from aogpt_plugin.training.sections import RunSettings
    from aogpt_plugin.training.titan03.trainer import run_settings

    args = [
        "--module",
        "aogpt_plugin",
        "--config",
        "aogpt_debug",
        "--dump_folder",
        "/tmp/x",
        "--training.seq_len",
        "64",
    ]
    args += ["--validator.val_seq_len", "0", "--dataloader.dataset_path", "a.jsonl", "--aogpt.order", "l2r"]
    config = ConfigManager().parse_args(args)
    settings = run_settings(config)
    assert isinstance(settings, RunSettings) and settings.aogpt is config.aogpt and settings.ema is config.ema
    assert config.settings is None  # the Trainer's `share_settings` builds the one it holds
    assert (settings.job.dump_folder, settings.model.name, settings.model.flavor) == ("/tmp/x", "aogpt", "debugmodel")
    assert (settings.training.seq_len, settings.training.dataset_path) == (64, "a.jsonl")
    assert settings.validation.seq_len == 64  # validator.val_seq_len 0: the training value
    assert settings.validation.local_batch_size == config.validator.val_local_batch_size == 8
    assert settings.aogpt.order == "l2r"
    for f in dataclasses.fields(settings.checkpoint):  # typed copies of the config's own values (None kept)
        held, given = getattr(settings.checkpoint, f.name), getattr(config.checkpoint, f.name)
        assert held == (None if given is None else type(held)(given)), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.training = None


# Every recipe's RunSettings as torchtitan 0.2.2's glue builds them, printed as JSON by `make setup`'s venv.
DUMP_0_2_2 = """
import dataclasses, glob, json
from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu, parse_command_line
enable_torchtitan_on_cpu()
import aogpt_plugin
aogpt_plugin.register()
recipes = sorted(glob.glob("train_configs/*.toml")) + sorted(glob.glob("train_configs/study/*.toml"))
print(json.dumps({r: dataclasses.asdict(parse_command_line(["--job.config_file", r])[1]) for r in recipes}))
"""


@needs_titan03
def test_every_recipe_gives_equal_run_settings_on_0_2_2_and_0_3(titan03_on_cpu):
    """The one settings type of the shared code, read by each version's glue off its own config: a recipe
    parsed by 0.2.2 (`make setup`'s .venv, in a subprocess) and by 0.3 (here) gives equal RunSettings."""
    from aogpt_plugin.training.titan03.launch import parse_command_line

    python = ROOT / ".venv" / "bin" / "python"
    assert python.exists(), "the torchtitan 0.2.2 venv is missing: run `make setup`"
    proc = subprocess.run([str(python), "-c", DUMP_0_2_2], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    on_0_2_2 = json.loads(proc.stdout.strip().splitlines()[-1])
    recipes = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "train_configs").rglob("*.toml"))
    assert sorted(on_0_2_2) == recipes and len(recipes) > 5
    for recipe in recipes:
        settings = parse_command_line(["--job.config_file", recipe])[1]
        assert json.loads(json.dumps(dataclasses.asdict(settings))) == on_0_2_2[recipe], recipe
