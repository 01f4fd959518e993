"""torchtitan 0.3's `parallelize_fn` for AO-GPT: float8 -> activation checkpointing -> per-block compile -> FSDP2
(or DDP), then the shared finish (EMA, NaN/inf load refusal: ../parallelize.py).

0.3 dropped the Llama helpers 0.2.2's glue reused (apply_ac, apply_compile) and its
`apply_fsdp_to_decoder` expects its own Decoder class; the FSDP2 units are the shared
`apply_fsdp` (../parallelize.py), as on 0.2.2.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torchtitan.config import TORCH_DTYPE_MAP
from torchtitan.distributed.fsdp import disable_fsdp_gradient_division
from torchtitan.tools.logging import logger

from ..parallelize import apply_fsdp, check_parallelism, finish_parallelized
from .float8 import convert_to_float8


def parallelize_aogpt(
    model: nn.Module, *, parallel_dims, training, parallelism, compile_config, ac_config, dump_folder: str, **unused
) -> nn.Module:
    check_parallelism(parallelism)
    if getattr(model, "float8_settings", None) is not None:  # first, where 0.2.2's model build swapped them
        model.float8_precompute = convert_to_float8(model, model.float8_settings, parallel_dims.fsdp_enabled)
        logger.info("Swapped aogpt's linears to float8 (quantize.linear.float8)")
    if ac_config is not None:
        ac_config.build(dump_folder=dump_folder).apply(model)
    if compile_config.enable and "model" in compile_config.components:
        for name, block in model.layers.named_children():
            model.layers.register_module(name, torch.compile(block, backend=compile_config.backend))
    if parallel_dims.fsdp_enabled:
        # the shard axis is "fsdp" under spmd_backend="partial_dtensor", "dp_shard" otherwise
        shard = "fsdp" if parallelism.spmd_backend == "partial_dtensor" else "dp_shard"
        names = ["dp_replicate", shard] if parallel_dims.dp_replicate_enabled else [shard]
        apply_fsdp(
            model,
            parallel_dims.get_mesh(names),
            param_dtype=TORCH_DTYPE_MAP[training.mixed_precision_param],
            reduce_dtype=TORCH_DTYPE_MAP[training.mixed_precision_reduce],
            cpu_offload=training.enable_cpu_offload,
            reshard_policy=parallelism.fsdp_reshard_after_forward,
            head_in_root=model.settings.aogpt.loss_path == "fused",
        )
        logger.info("Applied FSDP2 to aogpt (per block + root)")
    elif parallel_dims.dp_replicate_enabled:
        from torch.distributed._composable.replicate import replicate

        replicate(model, device_mesh=parallel_dims.get_mesh("dp_replicate"))
        disable_fsdp_gradient_division(model)
    return finish_parallelized(model, model.settings.ema)
