"""aogpt: Any-Order GPT for torchtitan.

Importing the package inside a torchtitan 0.2.2 process (`[experimental] custom_import = "aogpt_plugin"`)
registers the `aogpt` TrainSpec (training/); under torchtitan 0.3 nothing is registered and
`--module aogpt_plugin` finds config_registry.py. Outside one (sampler, evaluation) nothing of torchtitan
is imported; call `aogpt_plugin.register()` to register explicitly.
"""

import sys

__version__ = "0.1.0"


def register() -> None:
    from .training import register as _register

    _register()


if "torchtitan" in sys.modules:
    register()
