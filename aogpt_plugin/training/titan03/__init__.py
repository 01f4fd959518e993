"""torchtitan 0.3 glue: the Trainer.Config subclass and its components, the TOML recipe loader, the
config_registry functions, the CPU shims and the checkpoint save. Each file adapts shared modules of
training/ to 0.3's Configurable API (a nested `Config` per component, built by the Trainer)."""
