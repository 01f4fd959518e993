"""torchtitan 0.2.2's `parallelize_fn` for AO-GPT: activation checkpointing -> per-block compile -> FSDP2,
then the shared finish (EMA, NaN/inf load refusal: ../parallelize.py).

The same order torchtitan uses for Llama, reusing its helpers for activation checkpointing, compile
and DDP (the AO-GPT module tree keeps Llama's names: `tok_embeddings`, `layers`, `norm`, `output`);
the FSDP2 units are the shared `apply_fsdp` (../parallelize.py: Llama's grouping, and one that holds
a tied head), as on 0.3.
"""

from __future__ import annotations

import torch.nn as nn
from torchtitan.config import TORCH_DTYPE_MAP
from torchtitan.distributed.activation_checkpoint import apply_ac
from torchtitan.models.llama3.infra.parallelize import _op_sac_save_list, apply_compile, apply_ddp
from torchtitan.tools.logging import logger

from ..parallelize import apply_fsdp, check_parallelism, finish_parallelized
from .settings import share_settings


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
            cpu_offload=job_config.training.enable_cpu_offload,
            reshard_policy=job_config.parallelism.fsdp_reshard_after_forward,
            head_in_root=share_settings(job_config).aogpt.loss_path == "fused",
        )
        logger.info("Applied FSDP2 to aogpt (per block + root)")
    elif parallel_dims.dp_replicate_enabled:
        apply_ddp(model, parallel_dims.get_mesh("dp_replicate"), enable_compile=compile_model)
    return finish_parallelized(model, share_settings(job_config).ema)
