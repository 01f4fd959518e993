"""AO-GPT model: args, flavors and the decoder (pure PyTorch, no torchtitan import)."""

from .args import CONDITIONINGS, FLAVORS, AOGPTModelArgs

__all__ = ["AOGPT", "AOGPTModelArgs", "CONDITIONINGS", "FLAVORS", "TransformerBlock", "position_features"]


def __getattr__(name: str):
    """AOGPT (its block, its adaLN position features) on first use: the args and flavors alone load no torch
    (fast `aogpt ... --help`)."""
    if name in ("AOGPT", "TransformerBlock", "position_features"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
