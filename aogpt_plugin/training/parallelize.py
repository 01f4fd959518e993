"""What aogpt's `parallelize_fn` adds to torchtitan's wrapping, for every version: the parallelism it
supports, SUM reductions on gloo, and, last, the EMA of `[ema]` and the refusal of NaN/inf loads.

The wrapping itself (activation checkpointing -> per-block compile -> FSDP2 / DDP) is each glue's;
the FSDP2 units are the same on both versions (`apply_fsdp`). Tensor, context and pipeline
parallelism are not supported (the model is small enough for FSDP).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule

from ..errors import ConfigError
from .ema import attach_ema
from .nonfinite import refuse_nonfinite_load

UNSUPPORTED_DEGREES = ("tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree")
RESHARD_POLICIES = ("default", "always", "never")  # parallelism.fsdp_reshard_after_forward


def check_parallelism(parallelism) -> None:
    """What the parallelize_fn supports, asked by preflight (before the process group) and by it."""
    for key in UNSUPPORTED_DEGREES:
        if getattr(parallelism, key) > 1:
            raise ConfigError(
                f"parallelism.{key}={getattr(parallelism, key)} is not supported by aogpt; "
                "allowed: 1 (use FSDP/HSDP/DDP)"
            )


def apply_fsdp(
    model: nn.Module,
    mesh,
    param_dtype: torch.dtype,
    reduce_dtype: torch.dtype,
    cpu_offload: bool,
    reshard_policy: str,
    head_in_root: bool = False,
) -> None:
    """FSDP2 units as torchtitan groups Llama: embeddings / each block / final norm + head / root
    (positions, target table, final adaLN). A tied head (GPT-2's backbone) reads the token embedding
    after the blocks, and the fused loss path (`head_in_root`: `[aogpt] loss_path = "fused"`) reads the
    head's weights inside the root's forward without calling the head's module; then the embedding, the
    final norm, the head and the root are one unit: the root keeps its parameters gathered through
    forward and backward. Gradients are not divided by the
    data-parallel degree (the loss is divided by the global token count already), and gloo meshes
    reduce with SUM. `reshard_policy`: parallelism.fsdp_reshard_after_forward."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if reshard_policy not in RESHARD_POLICIES:
        raise ConfigError(
            f"parallelism.fsdp_reshard_after_forward={reshard_policy!r} is not supported; "
            f"allowed: {', '.join(RESHARD_POLICIES)}"
        )
    kwargs = {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)}
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    reshard = reshard_policy != "never"
    in_root = head_in_root or model.output is None
    if not in_root:
        fully_shard(model.tok_embeddings, **kwargs, reshard_after_forward=reshard)
    for block in model.layers.values():
        fully_shard(block, **kwargs, reshard_after_forward=reshard)
    if not in_root:  # not resharded after forward by default: FSDP would prefetch it for backward at once
        fully_shard([model.norm, model.output], **kwargs, reshard_after_forward=reshard_policy == "always")
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
    if mesh.device_type == "cpu":
        use_sum_reduction_on_gloo(model)


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
