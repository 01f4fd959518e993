"""The training side: everything of aogpt that imports torchtitan, and nothing else does.

The modules here hold what any torchtitan version shares (orders into the batch, the loss, the step
guard, the EMA, validation scoring, the preflight rules, the checkpoint save, the launcher, the run's
settings, the CPU support and the log filter); `titan022/` is the thin glue for torchtitan 0.2.2 (its
TrainSpec, config parser, builder signatures, checkpoint save wrap), `titan03/` the glue for
torchtitan 0.3 (its Trainer.Config subclass and components, the TOML recipe loader). The two glues
import the shared modules only, never each other (an import-linter contract), so either can be
dropped or a third added beside them. `register()` and `installed_glue()` are the places that pick the
glue of the installed version, at import time.
"""

from .versions import is_titan03, torchtitan_version  # noqa: F401  (the package's answer)


def installed_glue():
    """The installed version's launcher glue (titan022/launch.py or titan03/launch.py): one interface."""
    if is_titan03():
        from .titan03 import launch
    else:
        from .titan022 import launch
    return launch


def register() -> None:
    """Register the `aogpt` TrainSpec and datasets with torchtitan 0.2.2 (idempotent). On 0.3 there is
    nothing to register: `--module aogpt_plugin` finds the config functions (aogpt_plugin/config_registry.py)."""
    if is_titan03():
        return
    from .titan022.spec import register as register_titan022

    register_titan022()
