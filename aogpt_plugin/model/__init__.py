"""AO-GPT model: args, flavors and the decoder (pure PyTorch, no torchtitan import)."""

from .args import CONDITIONINGS, AOGPTModelArgs, ConfigError
from .flavors import FLAVORS
from .model import AOGPT

__all__ = ["AOGPT", "AOGPTModelArgs", "CONDITIONINGS", "ConfigError", "FLAVORS"]
