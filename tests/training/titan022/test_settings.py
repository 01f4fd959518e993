"""The run's settings under torchtitan 0.2.2 (training/titan022/settings.py): read off the parsed JobConfig
under the recipes' names, built once per JobConfig and held by it, so every builder torchtitan calls and
the checkpoint save get the same object (tests/training/titan03/test_settings.py: the same recipe gives
equal RunSettings on 0.3)."""

from __future__ import annotations

import dataclasses

import pytest

from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

import aogpt_plugin  # noqa: E402
from aogpt_plugin.errors import ConfigError  # noqa: E402
from aogpt_plugin.training.sections import RunSettings  # noqa: E402
from aogpt_plugin.training.titan022.config_parser import parse_job_config  # noqa: E402
from aogpt_plugin.training.titan022.settings import run_settings, share_settings  # noqa: E402

aogpt_plugin.register()


def test_run_settings_read_the_parsed_job_config_under_the_recipes_names():
    argv = ["--job.config_file", "train_configs/aogpt_debug.toml", "--job.dump_folder", "/tmp/x"]
    argv += ["--training.seq_len", "64", "--aogpt.order", "l2r", "--checkpoint.exclude_from_loading", "dataloader"]
    job_config = parse_job_config(argv)
    settings = run_settings(job_config)
    assert isinstance(settings, RunSettings) and settings.aogpt is job_config.aogpt and settings.ema is job_config.ema
    assert (settings.job.dump_folder, settings.model.name, settings.model.flavor) == ("/tmp/x", "aogpt", "debugmodel")
    assert settings.training.seq_len == 64 and settings.aogpt.order == "l2r"
    assert settings.validation.seq_len == job_config.validation.seq_len
    assert settings.checkpoint.exclude_from_loading == ("dataloader",)
    assert settings.float8 is job_config.quantize.linear.float8
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.training = None


def test_share_settings_builds_them_once_per_job_config():
    job_config = parse_job_config(["--job.config_file", "train_configs/aogpt_debug.toml"])
    first = share_settings(job_config)
    assert share_settings(job_config) is first and first == run_settings(job_config)
    other = parse_job_config(["--job.config_file", "train_configs/aogpt_debug.toml"])
    assert share_settings(other) is not first and share_settings(other) == first
    assert "aogpt_run_settings" not in job_config.to_dict()  # held beside the config's fields, not in them


def test_a_job_config_without_the_aogpt_section_is_one_line():
    job_config = parse_job_config(["--job.config_file", "train_configs/aogpt_debug.toml"])
    plain = dataclasses.replace(job_config)
    object.__delattr__(plain, "aogpt")
    with pytest.raises(
        ConfigError, match="lacks the \\[aogpt\\] section; set it to 'aogpt_plugin.training.job_config'"
    ):
        run_settings(plain)
