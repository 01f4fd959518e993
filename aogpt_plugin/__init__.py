"""aogpt: Any-Order GPT for torchtitan.

Importing the package inside a torchtitan 0.2.2 process (`[experimental] custom_import = "aogpt_plugin"`)
registers the `aogpt` TrainSpec (training/); under torchtitan 0.3 nothing is registered and
`--module aogpt_plugin` finds config_registry.py. Outside one (sampler, evaluation) nothing of torchtitan
is imported; call `aogpt_plugin.register()` to register explicitly.

`aogpt_plugin.load(path)` (api.py, imported on first use, so `import aogpt_plugin` stays light) gives
a model to sample from, score and differentiate in Python.
"""

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import load

__version__ = "0.1.0"
__all__ = ["load", "register"]


def __getattr__(name: str):
    if name == "load":
        from .api import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    from .training import register as _register

    _register()


if "torchtitan" in sys.modules:
    register()
