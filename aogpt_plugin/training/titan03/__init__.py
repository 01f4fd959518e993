"""torchtitan 0.3 glue: the Trainer.Config subclass, which builds the run's settings its components hold,
and the components, the TOML recipe loader, the CPU module list and the checkpoint save. Each file adapts
shared modules of training/ to 0.3's Configurable API (a nested `Config` per component, built by the
Trainer); aogpt_plugin/config_registry.py is the `--module aogpt_plugin` entry."""
