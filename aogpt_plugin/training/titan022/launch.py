"""What the shared launcher (../launcher.py) needs from torchtitan 0.2.2, with the interface of
titan03/launch.py: CPU shims, the parsed job config (it is its own 0.2.2-shaped view),
the names preflight checks against, and the run (torchtitan.train.main, which parses sys.argv again)."""

from __future__ import annotations

from collections.abc import Callable

from ..cpu import has_accelerator
from .config_parser import parse_job_config as _parse
from .config_parser import registered_names  # noqa: F401  (part of the interface)
from .cpu import enable_torchtitan_on_cpu


def enable_cpu() -> None:
    if not has_accelerator():
        enable_torchtitan_on_cpu()


def parse_job_config(argv: list[str]):
    """(job config, its view): on 0.2.2 the job config is the view the shared rules read."""
    job_config = _parse(argv)
    return job_config, job_config


def trainer_for(rank: int, config) -> Callable[[], None]:
    from .trainer import trainer_for as titan_trainer_for

    return titan_trainer_for(rank)
