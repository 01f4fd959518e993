"""Kept for recipes that set `[job] custom_config_module = "aogpt_plugin.job_config"`; new ones name
`aogpt_plugin.training.job_config`, which this module re-exports."""

from .training.job_config import AOGPT, EMA, JobConfig  # noqa: F401
