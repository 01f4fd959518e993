"""torchtitan `parallelize_fn` for AO-GPT: activation checkpointing -> per-block compile -> FSDP2 -> EMA.

The same order torchtitan uses for Llama, reusing its helpers: the AO-GPT module tree keeps
Llama's names (`tok_embeddings`, `layers`, `norm`, `output`), so Llama's FSDP grouping applies:
embeddings / each block / final norm + head / root (positions, target table, final adaLN).
Last, the EMA of `[ema]` is attached as `model.ema`, shaped like the (sharded) parameters (the
model's `init_weights` starts it and the optimizers container updates it, ema.py), and loading a
checkpoint with NaN/inf weights is refused (loss.py).
Tensor, context and pipeline parallelism are not supported (the model is small enough for FSDP).
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.fsdp import FSDPModule
from torchtitan.config import TORCH_DTYPE_MAP
from torchtitan.distributed.activation_checkpoint import apply_ac
from torchtitan.models.llama3.infra.parallelize import (
    _op_sac_save_list,
    apply_compile,
    apply_ddp,
    apply_fsdp,
)
from torchtitan.tools.logging import logger

from ..ema import attach_ema
from ..errors import ConfigError
from ..loss import refuse_nonfinite_load


def use_sum_reduction_on_gloo(model: nn.Module) -> None:
    """torchtitan divides gradients itself (factor 1.0), which FSDP2 turns into PREMUL_SUM;
    gloo rejects that op, so on CPU meshes ask FSDP for a plain SUM (numerically the same)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


UNSUPPORTED_DEGREES = ("tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree")


def check_parallelism(parallelism) -> None:
    """What this parallelize_fn supports, asked by preflight (before the process group) and below."""
    for key in UNSUPPORTED_DEGREES:
        if getattr(parallelism, key) > 1:
            raise ConfigError(
                f"parallelism.{key}={getattr(parallelism, key)} is not supported by aogpt; "
                "allowed: 1 (use FSDP/HSDP/DDP)"
            )


def parallelize_aogpt(model: nn.Module, parallel_dims, job_config) -> nn.Module:
    check_parallelism(job_config.parallelism)

    compile_model = job_config.compile.enable and "model" in job_config.compile.components
    if job_config.activation_checkpoint.mode != "none":
        apply_ac(
            model,
            job_config.activation_checkpoint,
            model_compile_enabled=compile_model,
            op_sac_save_list=_op_sac_save_list,
            base_folder=job_config.job.dump_folder,
        )
    if compile_model:
        apply_compile(model, job_config.compile)

    if parallel_dims.fsdp_enabled:
        names = ["dp_replicate", "fsdp"] if parallel_dims.dp_replicate_enabled else ["fsdp"]
        dp_mesh = parallel_dims.get_mesh(names)
        apply_fsdp(
            model,
            dp_mesh,
            param_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_param],
            reduce_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_reduce],
            pp_enabled=False,
            cpu_offload=job_config.training.enable_cpu_offload,
            reshard_after_forward_policy=job_config.parallelism.fsdp_reshard_after_forward,
        )
        if dp_mesh.device_type == "cpu":
            use_sum_reduction_on_gloo(model)
        logger.info("Applied FSDP2 to aogpt (per block + root)")
    elif parallel_dims.dp_replicate_enabled:
        apply_ddp(model, parallel_dims.get_mesh("dp_replicate"), enable_compile=compile_model)
    if job_config.ema.enable:
        attach_ema(model, job_config.ema.decay, job_config.ema.warmup)
    model.register_load_state_dict_post_hook(refuse_nonfinite_load)
    return model
