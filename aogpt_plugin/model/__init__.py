"""AO-GPT model: args, flavors and the decoder (pure PyTorch, no torchtitan import)."""

from ..errors import ConfigError
from .args import CONDITIONINGS, AOGPTModelArgs
from .flavors import FLAVORS
from .model import AOGPT

__all__ = ["AOGPT", "AOGPTModelArgs", "CONDITIONINGS", "ConfigError", "FLAVORS"]
