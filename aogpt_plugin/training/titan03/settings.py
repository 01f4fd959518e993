"""How a torchtitan 0.3 component's Config holds the run's settings (RunSettings, ../sections.py).

0.3 components see only their own Config, built by the Trainer. The Trainer builds the run's
RunSettings once (trainer.py, `share_settings`) and sets it on the Configs of the tokenizer,
dataloader, loss, validator and model; `[aogpt]` and `[ema]` are set in one place, the Trainer's
Config (`--aogpt.*`, `--ema.*`). The field is suppressed from the command line, as 0.3's own
`model_spec` is. Its annotation names no class: the components sit below ../sections.py's
importers in the package's import order (`python scripts/import_levels.py`).
"""

from __future__ import annotations

from typing import Annotated, Any

import tyro

HeldSettings = Annotated[Any, tyro.conf.Suppress]
"""A component Config's `settings` field: the run's RunSettings, handed in by the Trainer (None before)."""
