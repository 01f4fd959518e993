"""aogpt's checkpoint save under torchtitan 0.3: the shared `save_recorded` (../checkpointing.py:
each step folder's `aogpt.json` record, a requested stop that saves, a full disk named) around 0.3's
own save.

0.3 builds the checkpointer with `config.checkpoint.build(...)`, which constructs the class that
declares the Config, so the subclass declares its own (unchanged) Config; 0.3's public `save` (on
its base class) calls `_save`, which is what is overridden. The Trainer (trainer.py) hands it the
run's record (`record_of`) and its step guard; without them it is 0.3's manager unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.checkpoint import CheckpointManager

from ..checkpointing import save_recorded, stop_without_checkpoint


class AOGPTCheckpointManager(CheckpointManager):
    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        pass

    record_of = None  # () -> (record, tokenizer.json or None): set by the Trainer for an aogpt run
    guard = None

    def save(self, curr_step: int, last_step: bool = False) -> bool:
        if not self.enable and self.record_of is not None:  # checkpointing off: a requested stop still ends the run
            stop_without_checkpoint(self.guard, curr_step, last_step)
        return super().save(curr_step, last_step)

    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        if self.record_of is None:
            return super()._save(curr_step, last_step)
        return save_recorded(
            self,
            curr_step,
            last_step,
            lambda: super(AOGPTCheckpointManager, self)._save(curr_step, last_step),
            self.maybe_wait_for_saving,
            self.record_of,
            self.guard,
        )
