"""The job config of the running torchtitan job, for builders torchtitan does not pass it to.

torchtitan 0.2.2 hands `build_optimizers_fn` only `job_config.optimizer`; the EMA options live in
`[ema]`. The tokenizer builder (always the first builder the Trainer calls) records the config here.
"""

from __future__ import annotations

_JOB_CONFIG = None


def set_current_job_config(job_config) -> None:
    global _JOB_CONFIG
    _JOB_CONFIG = job_config


def current_job_config():
    return _JOB_CONFIG
