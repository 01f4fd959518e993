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
)

_HELD = "aogpt_run_settings"  # the JobConfig attribute that holds its RunSettings (not a config field)


def run_settings(job_config) -> RunSettings:
    """The RunSettings of a parsed 0.2.2 JobConfig (its `aogpt` and `ema` sections, the rest copied)."""
    if not hasattr(job_config, "aogpt"):
        raise ConfigError(
            f"job.custom_config_module={job_config.job.custom_config_module!r} lacks the [aogpt] "
            f"section; set it to {CUSTOM_CONFIG_MODULE!r}"
        )
    t, v, o = job_config.training, job_config.validation, job_config.optimizer
    ckpt, comp, sched, par = job_config.checkpoint, job_config.compile, job_config.lr_scheduler, job_config.parallelism
    return RunSettings(
        aogpt=job_config.aogpt,
        ema=job_config.ema,
        job=Job(dump_folder=job_config.job.dump_folder),
        model=Model(
            name=job_config.model.name, flavor=job_config.model.flavor, converters=tuple(job_config.model.converters)
        ),
        training=Training(
            dataset=t.dataset,
            dataset_path=t.dataset_path,
            seq_len=t.seq_len,
            local_batch_size=t.local_batch_size,
            global_batch_size=t.global_batch_size,
            steps=t.steps,
            max_norm=t.max_norm,
        ),
        validation=Validation(
            enable=v.enable,
            dataset=v.dataset,
            dataset_path=v.dataset_path,
            seq_len=v.seq_len,
            local_batch_size=v.local_batch_size,
            steps=v.steps,
            freq=v.freq,
        ),
        optimizer=Optimizer(
            name=o.name,
            lr=o.lr,
            beta1=o.beta1,
            beta2=o.beta2,
            weight_decay=o.weight_decay,
            early_step_in_backward=o.early_step_in_backward,
        ),
        lr_scheduler=LRScheduler(warmup_steps=sched.warmup_steps, decay_ratio=sched.decay_ratio),
        parallelism=Parallelism(
            tensor_parallel_degree=par.tensor_parallel_degree,
            context_parallel_degree=par.context_parallel_degree,
            pipeline_parallel_degree=par.pipeline_parallel_degree,
        ),
        checkpoint=Checkpoint(
            enable=ckpt.enable,
            folder=ckpt.folder,
            interval=ckpt.interval,
            keep_latest_k=ckpt.keep_latest_k,
            load_step=ckpt.load_step,
            exclude_from_loading=tuple(ckpt.exclude_from_loading),
            initial_load_path=ckpt.initial_load_path,
            initial_load_in_hf=ckpt.initial_load_in_hf,
            initial_load_model_only=ckpt.initial_load_model_only,
            last_save_in_hf=ckpt.last_save_in_hf,
        ),
        compile=Compile(enable=comp.enable, components=tuple(comp.components), backend=comp.backend),
        float8=job_config.quantize.linear.float8,
    )


def share_settings(job_config) -> RunSettings:
    """The one RunSettings of `job_config`: built at the first call, held by the JobConfig after."""
    settings = getattr(job_config, _HELD, None)
    if settings is None:
        settings = run_settings(job_config)
        setattr(job_config, _HELD, settings)
    return settings
