"""`python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml` (also under torchrun).

With an accelerator this is torchtitan.train after a config check. Without one it first makes
torchtitan run on the CPU (cpu_support.py). Either way the job config is parsed and checked
before any process group starts: a bad value prints one `error:` line and exits with status 2.
"""

from __future__ import annotations

import sys

from .cpu_support import enable_torchtitan_on_cpu, has_accelerator
from .errors import ConfigError


def main() -> int:
    argv = sys.argv[1:]
    if not has_accelerator():
        enable_torchtitan_on_cpu()
    from . import register
    from .preflight import check_job_config, parse_job_config

    register()
    try:
        check_job_config(parse_job_config(argv))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import torchtitan.train as titan

    titan.main(titan.Trainer)  # parses sys.argv again, exactly as `-m torchtitan.train` would
    return 0


if __name__ == "__main__":
    sys.exit(main())
