"""What the shared launcher (../launcher.py) needs from torchtitan 0.3: the CPU shims (cpu.py), the names
the shared preflight checks against (dataset_names.py), the parser of a recipe plus a 0.2.2-style
command line with the run's settings (../sections.py) it builds once, and the training run itself
(torchtitan.train.main's body, on the config already parsed and checked).

`python -m aogpt_plugin.train --job.config_file R.toml --training.steps 8 --job.dump_folder D`
means the same on 0.2.2 and 0.3: the recipe is loaded by recipe.py, the options are renamed to
0.3's paths (recipe.translate_cli) and parsed by 0.3's own tyro parser, over the recipe's values.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable

from ...errors import ConfigError
from ..config_checks import check_cli_args
from ..console import box_message, quiet_known_noise
from ..cpu import has_accelerator
from ..sections import RunSettings
from ..text_datasets import register_datasets
from .cpu import enable_cpu  # noqa: F401  (part of the interface)
from .dataset_names import registered_names  # noqa: F401  (part of the interface)


def parse_command_line(argv: list[str]) -> tuple[object, RunSettings]:
    """(the AOGPTTrainer.Config of `argv`, its run settings, built once and held by it); every error one
    ConfigError line."""
    import tyro
    from torchtitan.config import ConfigManager
    from torchtitan.config.manager import custom_registry
    from torchtitan.tools.logging import init_logger

    from .model import model_registry
    from .recipe import load_recipe, translate_cli
    from .trainer import AOGPTTrainer, share_settings

    init_logger()

    special, args = translate_cli(argv)
    path = special.get("job.config_file")
    if not path:
        raise ConfigError("--job.config_file is required; allowed: a recipe such as train_configs/aogpt_debug.toml")
    register_datasets()
    config = load_recipe(
        path,
        AOGPTTrainer.Config,
        model_registry,
        flavor=special.get("model.flavor"),
        ac_mode=special.get("activation_checkpoint.mode"),
    )
    check_cli_args(type(config), args)  # every unknown option named, with the nearest one
    err, manager = io.StringIO(), ConfigManager()  # its constructor registers torchtitan's tyro rules
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = tyro.cli(type(config), args=args, default=config, registry=custom_registry)
    except ConfigError:
        raise
    except (ValueError, AssertionError) as e:  # 0.3's own __post_init__ checks
        raise ConfigError((str(e).strip().splitlines() or [type(e).__name__])[0]) from None
    except SystemExit as e:
        if not e.code:  # --help
            print(err.getvalue(), end="")
            raise
        raise ConfigError(box_message(err.getvalue())) from None
    manager.config = config
    manager._validate_config()
    return config, share_settings(config)


def trainer_for(rank: int, config) -> Callable[[], None]:
    """torchtitan.train.main's body on `config` (0.3's main parses sys.argv itself)."""
    from torchtitan.observability import structured_logger as sl

    quiet_known_noise(has_accelerator())
    if rank != 0 and os.environ.get("AOGPT_LOG_ALL_RANKS") != "1":
        logging.getLogger().setLevel(logging.WARNING)

    def run() -> None:
        import torch

        sl.init_structured_logger(
            source="training", output_dir=config.dump_folder, enable=config.debug.enable_structured_logging
        )
        trainer = None
        try:
            trainer = config.build()
            trainer.train()
        except BaseException:
            if trainer is not None:
                trainer.close()
            raise
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    return run
