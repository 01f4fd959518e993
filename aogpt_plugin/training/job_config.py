"""The module recipes name as `[job] custom_config_module`: a `JobConfig` dataclass whose fields
torchtitan's ConfigManager (0.2.2's contract) merges into its own JobConfig as the `[aogpt]` and
`[ema]` TOML sections and their CLI options (sections.py). No torchtitan import."""

from dataclasses import dataclass, field

from .sections import AOGPT, EMA


@dataclass
class JobConfig:
    aogpt: AOGPT = field(default_factory=AOGPT)
    ema: EMA = field(default_factory=EMA)
