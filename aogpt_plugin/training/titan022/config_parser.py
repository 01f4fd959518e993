"""torchtitan 0.2.2's job config parser (TOML < CLI, through its ConfigManager's own lookup and class
merge), with every error as one ConfigError line, and the names it has registered that the shared
preflight checks against (`check_settings(settings, world_size, **registered_names())`)."""

from __future__ import annotations

import contextlib
import io
import warnings

from ...errors import ConfigError
from ..config_checks import CUSTOM_CONFIG_MODULE, check_cli_args, check_types, config_files, unknown_toml_keys
from ..console import box_message


def registered_names() -> dict:
    """The datasets and model converters torchtitan 0.2.2 has registered (aogpt's datasets once
    `aogpt_plugin.training.register()` ran), as preflight.check_settings' keyword arguments."""
    from torchtitan.components import quantization  # noqa: F401  (registers the float8 / MX converters)
    from torchtitan.hf_datasets.text_datasets import DATASETS
    from torchtitan.protocols.model_converter import _registry_model_converter_cls as converters

    return {"datasets": DATASETS, "converters": converters}


def parse_job_config(argv: list[str]):
    """torchtitan's own parser (TOML < CLI). First every TOML key and CLI option is checked against
    the merged JobConfig (all unknown ones named, with the nearest valid key; CLI values against
    their types); what is left of its errors, and of its CLI library's boxed usage errors, becomes one
    ConfigError line; `--help` still prints the full help."""
    from torchtitan.config import ConfigManager

    err, manager = io.StringIO(), ConfigManager()
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "field annotated int but default is str": reported below
            toml = manager._maybe_load_toml(argv)  # torchtitan 0.2.2's own TOML lookup and class merge
            config_cls = manager._maybe_add_custom_config(argv, toml)
            unknown = unknown_toml_keys(config_cls, toml or {})
            if unknown:
                keys = f"key{'s' * (len(unknown) > 1)}"
                raise ConfigError(f"unknown {keys} in {_config_file(argv)}: {', '.join(unknown)}")
            check_cli_args(config_cls, argv)
            job_config = manager.parse_args(argv)
        check_types(job_config, "")  # every value its field's type: the CLI library checks no TOML value
        return job_config
    except ConfigError:
        raise
    except ImportError as e:
        raise ConfigError(f"job.custom_config_module: {e}; allowed: {CUSTOM_CONFIG_MODULE!r}") from None
    except (ValueError, FileNotFoundError, AssertionError) as e:  # torchtitan's own checks
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(first) from None
    except SystemExit as e:
        if not e.code:  # --help
            print(err.getvalue(), end="")
            raise
        raise ConfigError(box_message(err.getvalue())) from None


def _config_file(argv: list[str]) -> str:
    return next(iter(config_files(argv)), "the TOML file")
