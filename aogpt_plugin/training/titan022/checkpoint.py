"""aogpt's checkpoint save under torchtitan 0.2.2: its CheckpointManager's `save` wrapped once
(`install`, called at registration) so that, for an aogpt run, the shared `save_recorded`
(../checkpointing.py) writes each step folder's record, turns a requested stop into a complete
checkpoint and StopRequested, and a full disk into one CheckpointDiskFullError line.
"""

from __future__ import annotations

from ..checkpointing import run_record, save_recorded, stop_without_checkpoint
from .settings import share_settings


def _aogpt_run(manager):
    """(trainer, guard) when `manager` saves an aogpt run, else None."""
    trainer = manager.states.get("train_state")
    job_config = getattr(trainer, "job_config", None)
    if job_config is None or job_config.model.name != "aogpt" or not hasattr(job_config, "aogpt"):
        return None
    return trainer, getattr(manager.states.get("optimizer"), "guard", None)


def install(checkpoint_manager_cls) -> None:
    """Wrap `checkpoint_manager_cls.save` (idempotent)."""
    original = checkpoint_manager_cls.save
    if getattr(original, "aogpt", False):
        return

    def save(self, curr_step: int, last_step: bool = False) -> None:
        run = _aogpt_run(self)
        if run is None:
            return original(self, curr_step, last_step)
        trainer, guard = run
        if not self.enable:  # checkpointing off: a requested stop still ends the run after this step
            stop_without_checkpoint(guard, curr_step, last_step)
            return original(self, curr_step, last_step)
        save_recorded(
            self,
            curr_step,
            last_step,
            lambda: original(self, curr_step, last_step),
            self._async_wait,
            lambda: run_record(share_settings(trainer.job_config)),
            guard,
        )

    save.aogpt = True
    checkpoint_manager_cls.save = save
