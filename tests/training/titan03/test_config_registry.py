"""`--module aogpt_plugin --config NAME` under torchtitan 0.3: the recipe's TOML is the config."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest
from conftest import ROOT

from .conftest import needs_titan03

pytestmark = needs_titan03


def _parse(args: list[str]):
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(args)


@pytest.mark.parametrize(
    "name", ["aogpt_medium", "aogpt_debug", "aogpt_tiny_from_gpt2", "aogpt_small_from_gpt2", "aogpt_medium_from_gpt2"]
)
def test_config_function_equals_its_toml(titan03_on_cpu, name):
    from aogpt_plugin.model import FLAVORS
    from aogpt_plugin.training.sections import AOGPT, EMA
    from aogpt_plugin.training.titan03.trainer import share_settings

    toml = tomllib.loads((ROOT / "train_configs" / f"{name}.toml").read_text())
    config = _parse(["--module", "aogpt_plugin", "--config", name])
    assert config.model_spec.name == "aogpt" and config.model_spec.flavor == toml["model"]["flavor"]
    args = FLAVORS[toml["model"]["flavor"]]
    model = config.model_spec.model
    assert dataclasses.asdict(model.args) == dataclasses.asdict(args)
    aogpt = dict(toml["aogpt"])
    if aogpt.get("tokenizer", "gpt2").endswith(".json"):  # a relative file resolves against the checkout (recipe.py)
        aogpt["tokenizer"] = str(ROOT / aogpt["tokenizer"])
    assert config.aogpt == AOGPT(**aogpt) and config.ema == EMA(**toml["ema"])
    for key, value in toml["optimizer"].items():
        assert getattr(config.optimizer, key) == value, key
    for key, value in toml["lr_scheduler"].items():
        assert getattr(config.lr_scheduler, key) == value, key
    for key, value in toml["training"].items():
        section, key = ("dataloader", key) if key.startswith("dataset") else ("training", key)
        got = getattr(getattr(config, section), key)
        assert got == value or (key == "dataset_path" and got.endswith(value.lstrip("./"))), key
    for key, value in toml["checkpoint"].items():
        assert getattr(config.checkpoint, key) == value, key
    val = toml["validation"]
    assert (config.validator.enable, config.validator.freq, config.validator.steps) == (
        val["enable"],
        val["freq"],
        val["steps"],
    )
    assert (config.validator.val_seq_len, config.validator.val_local_batch_size) == (
        val["seq_len"],
        val["local_batch_size"],
    )
    settings = share_settings(config)  # [aogpt] reaches the components: they hold the run's settings
    assert settings.aogpt is config.aogpt and config.dataloader.settings.aogpt.order == toml["aogpt"]["order"]
    for part in (config.tokenizer, config.dataloader, config.loss, config.validator, model):
        assert part.settings is settings
    assert config.training.disable_cuda_graphs
    assert config.model.converters == toml["model"].get("converters", [])
    float8 = toml.get("quantize", {}).get("linear", {}).get("float8", {})
    for key, value in float8.items():
        assert getattr(config.quantize.linear.float8, key) == value, key


def test_float8_keys_keep_their_0_2_2_meaning(titan03_on_cpu):
    """`--model.converters` and `--quantize.linear.float8.*` reach the model Config, which the
    parallelize_fn converts from (the training itself: test_train.py)."""
    from aogpt_plugin.training.titan03.trainer import share_settings

    args = ["--module", "aogpt_plugin", "--config", "aogpt_medium", "--model.converters", "quantize.linear.float8"]
    config = _parse([*args, "--quantize.linear.float8.filter_fqns", "output,adaln"])
    assert config.model.converters == ["quantize.linear.float8"]
    assert config.quantize.linear.float8.filter_fqns == ["output", "adaln"]
    assert config.quantize.linear.float8.enable_fsdp_float8_all_gather  # the recipe's value
    share_settings(config)  # as the Trainer does, before torchtitan builds the model
    config.model_spec.model.update_from_config(config=config)
    assert config.model_spec.model.float8 == config.quantize.linear.float8
    plain = _parse(["--module", "aogpt_plugin", "--config", "aogpt_medium"])
    share_settings(plain)
    plain.model_spec.model.update_from_config(config=plain)
    assert plain.model_spec.model.float8 is None  # converters = [] in the recipe: no swap


def test_cli_overrides_keep_their_meaning(titan03_on_cpu):
    from aogpt_plugin.training.titan03.trainer import share_settings

    args = ["--module", "aogpt_plugin", "--config", "aogpt_debug", "--optimizer.lr", "1e-4", "--training.steps", "3"]
    args += ["--aogpt.order", "l2r", "--ema.decay", "0.5", "--checkpoint.interval", "2"]
    config = _parse(args)
    assert (config.optimizer.lr, config.training.steps, config.checkpoint.interval) == (1e-4, 3, 2)
    settings = share_settings(config)
    assert config.aogpt.order == "l2r" and config.dataloader.settings.aogpt.order == "l2r" and config.ema.decay == 0.5
    assert settings.ema.decay == 0.5 and config.model_spec.model.settings.ema.decay == 0.5


def test_every_recipe_loads_and_unknown_keys_are_named(tmp_path, titan03_on_cpu):
    from aogpt_plugin.errors import ConfigError
    from aogpt_plugin.training.titan03.model import model_registry
    from aogpt_plugin.training.titan03.recipe import load_recipe as load
    from aogpt_plugin.training.titan03.trainer import AOGPTTrainer

    def load_recipe(path, **kw):
        return load(path, AOGPTTrainer.Config, model_registry, **kw)

    for path in sorted((ROOT / "train_configs").rglob("*.toml")):
        load_recipe(str(path), root=str(ROOT))
    bad = tmp_path / "bad.toml"
    bad.write_text(
        (ROOT / "train_configs" / "aogpt_debug.toml").read_text().replace("[training]", "[training]\nsteps_x = 3")
    )
    with pytest.raises(ConfigError, match=r"unknown key in .*bad.toml .*: \[training\] steps_x$"):
        load_recipe(str(bad))
    bad.write_text("[aogpt]\norderr = 'l2r'\n")
    with pytest.raises(ConfigError, match=r"unknown key: \[aogpt\] orderr"):
        load_recipe(str(bad))


def test_the_preflight_is_the_configs_own_set_by_the_stock_entry(titan03_on_cpu):
    """No hidden switch: the stock entry's config holds the preflight the Trainer runs (its config log stays
    JSON); the launcher's config holds none (it checked before any process); the Trainer class holds nothing."""
    import json

    from aogpt_plugin import config_registry
    from aogpt_plugin.training.titan03.launch import parse_command_line
    from aogpt_plugin.training.titan03.trainer import AOGPTTrainer

    stock = _parse(["--module", "aogpt_plugin", "--config", "aogpt_debug", "--training.steps", "3"])
    assert stock.preflight is config_registry._preflight and stock.training.steps == 3  # through tyro's parse
    assert json.loads(json.dumps(stock.to_dict()))["preflight"] is True
    launched, _ = parse_command_line(["--job.config_file", "train_configs/aogpt_debug.toml"])
    assert launched.preflight is None and json.loads(json.dumps(launched.to_dict()))["preflight"] is False
    assert "preflight" not in vars(AOGPTTrainer)
