"""The run's settings under torchtitan 0.2.2 (RunSettings, ../sections.py): `run_settings` reads them off
its JobConfig, whose paths are the recipes' own (the recipes are written in 0.2.2's names), as
titan03/trainer.py's `run_settings` reads them off a 0.3 config.

0.2.2's Trainer hands every builder it calls (tokenizer, dataloader, loss, validator, parallelize_fn)
the JobConfig and nothing else, so the JobConfig is where the run's settings are held: the first
`share_settings(job_config)` builds them, every later call (a builder, the checkpoint save) gets
that same object. The launcher runs the Trainer on the JobConfig it parsed and checked
(launch.py), so a launch builds them once.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..config_checks import CUSTOM_CONFIG_MODULE
from ..sections import (
    Checkpoint,
    Compile,
    Job,
    LRScheduler,
    Model,
    Optimizer,
    Parallelism,
    RunSettings,
    Training,
    Validation,
    section_of,
)

_HELD = "aogpt_run_settings"  # the JobConfig attribute that holds its RunSettings (not a config field)


def run_settings(job_config) -> RunSettings:
    """The RunSettings of a parsed 0.2.2 JobConfig (its `aogpt` and `ema` sections, the rest copied)."""
    if not hasattr(job_config, "aogpt"):
        raise ConfigError(
            f"job.custom_config_module={job_config.job.custom_config_module!r} lacks the [aogpt] "
            f"section; set it to {CUSTOM_CONFIG_MODULE!r}"
        )
    return RunSettings(
        aogpt=job_config.aogpt,
        ema=job_config.ema,
        job=Job(dump_folder=job_config.job.dump_folder),
        model=section_of(Model, job_config.model),
        training=section_of(Training, job_config.training),
        validation=section_of(Validation, job_config.validation),
        optimizer=section_of(Optimizer, job_config.optimizer),
        lr_scheduler=section_of(LRScheduler, job_config.lr_scheduler),
        parallelism=section_of(Parallelism, job_config.parallelism),
        checkpoint=section_of(Checkpoint, job_config.checkpoint),
        compile=section_of(Compile, job_config.compile),
        float8=job_config.quantize.linear.float8,
    )


def share_settings(job_config) -> RunSettings:
    """The one RunSettings of `job_config`: built at the first call, held by the JobConfig after."""
    settings = getattr(job_config, _HELD, None)
    if settings is None:
        settings = run_settings(job_config)
        setattr(job_config, _HELD, settings)
    return settings
