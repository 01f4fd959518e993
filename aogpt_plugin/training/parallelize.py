"""What aogpt's `parallelize_fn` adds to torchtitan's wrapping, for every version: the parallelism it
supports, SUM reductions on gloo, and, last, the EMA of `[ema]` and the refusal of NaN/inf loads.

The wrapping itself (activation checkpointing -> per-block compile -> FSDP2 / DDP) reuses the
installed torchtitan's Llama helpers (titan022/parallelize.py). Tensor, context and pipeline
parallelism are not supported (the model is small enough for FSDP).
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.fsdp import FSDPModule

from ..errors import ConfigError
from .ema import attach_ema
from .nonfinite import refuse_nonfinite_load

UNSUPPORTED_DEGREES = ("tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree")


def check_parallelism(parallelism) -> None:
    """What the parallelize_fn supports, asked by preflight (before the process group) and by it."""
    for key in UNSUPPORTED_DEGREES:
        if getattr(parallelism, key) > 1:
            raise ConfigError(
                f"parallelism.{key}={getattr(parallelism, key)} is not supported by aogpt; "
                "allowed: 1 (use FSDP/HSDP/DDP)"
            )


def use_sum_reduction_on_gloo(model: nn.Module) -> None:
    """torchtitan divides gradients itself (factor 1.0), which FSDP2 turns into PREMUL_SUM;
    gloo rejects that op, so on CPU meshes ask FSDP for a plain SUM (numerically the same)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


def finish_parallelized(model: nn.Module, ema_config) -> nn.Module:
    """After the wrapping: the EMA of `[ema]` as `model.ema`, shaped like the (sharded) parameters
    (the optimizers start and update it, ema.py), and a checkpoint with NaN/inf tensors refused."""
    if ema_config.enable:
        attach_ema(model, ema_config.decay, ema_config.warmup)
    model.register_load_state_dict_post_hook(refuse_nonfinite_load)
    return model
