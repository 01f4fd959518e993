"""AO-GPT model: args, flavors and the decoder (pure PyTorch, no torchtitan import)."""

from .args import CONDITIONINGS, FLAVORS, AOGPTModelArgs
from .model import AOGPT

__all__ = ["AOGPT", "AOGPTModelArgs", "CONDITIONINGS", "FLAVORS"]
