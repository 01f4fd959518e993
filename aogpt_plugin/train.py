"""`python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml` (also under torchrun).

With an accelerator this is torchtitan.train after a config check. Without one it first makes
torchtitan run on the CPU (cpu_support.py). Either way the job config is parsed and checked
before any process group starts: a bad value prints one `error:` line and exits with status 2.
Run without torchrun, it is a world of one process.
"""

from __future__ import annotations

import os
import socket
import sys

from .cpu_support import enable_torchtitan_on_cpu, has_accelerator
from .errors import ConfigError


def default_to_one_process() -> None:
    """Outside torchrun, run as a world of one (torchtitan reads torchrun's environment)."""
    if "LOCAL_RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for key, value in env.items():
        os.environ.setdefault(key, value)


def main() -> int:
    argv = sys.argv[1:]
    default_to_one_process()
    if not has_accelerator():
        enable_torchtitan_on_cpu()
    from .preflight import check_job_config, parse_job_config
    from .train_spec import register

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
