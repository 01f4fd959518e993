"""aogpt: Any-Order GPT for torchtitan.

Importing the package inside a torchtitan process (`[experimental] custom_import = "aogpt_plugin"`)
registers the `aogpt` TrainSpec. Outside one (sampler, evaluation) nothing of torchtitan is
imported; call `aogpt_plugin.register()` to register explicitly.
"""

import sys

__version__ = "0.1.0"


def register() -> None:
    from .train_spec import register as _register

    _register()


if "torchtitan" in sys.modules:
    register()
