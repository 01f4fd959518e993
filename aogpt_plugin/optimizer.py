"""torchtitan `build_optimizers_fn` for AO-GPT: the authors' AdamW groups, EMA and a NaN guard.

* Weight decay only on >= 2-D tensors (matmul weights and embeddings), as the authors do;
  torchtitan's stock container decays biases and norm weights too.
* After every optimizer step the EMA (see ema.py) is updated.
* Before every optimizer step the summed loss of the step is checked; a NaN/inf loss on any rank
  stops training *before* the weights change, so no checkpoint written later holds bad weights
  and the last good one stays the newest.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers

from .ema import attach_ema
from .run_context import current_job_config


class NonFiniteLossError(RuntimeError):
    pass


class LossWatch:
    """Accumulates the loss sums torchtitan computes between two optimizer steps (no host sync)."""

    def __init__(self) -> None:
        self.total: torch.Tensor | None = None

    def record(self, loss_sum: torch.Tensor) -> None:
        v = loss_sum.detach().float()
        self.total = v if self.total is None else self.total + v

    def pop_nonfinite(self) -> bool:
        """True if any rank saw a non-finite loss since the last call (one tiny all-reduce)."""
        if self.total is None:
            return False
        bad = (~torch.isfinite(self.total)).float().reshape(1)
        self.total = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        return bool(bad.item())


LOSS_WATCH = LossWatch()


class AOGPTOptimizersContainer(OptimizersContainer):
    def __init__(self, model_parts, optimizer_cls, optimizer_kwargs, ema=None, nan_check=True):
        all_params = []
        self.optimizers = []
        self.model_parts = model_parts
        wd = optimizer_kwargs["weight_decay"]
        for model in model_parts:
            params = [p for p in model.parameters() if p.requires_grad]
            groups = [
                {"params": [p for p in params if p.ndim >= 2], "weight_decay": wd},
                {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
            ]
            self.optimizers.append(optimizer_cls(groups, **optimizer_kwargs))
            all_params.extend(params)
        self._validate_length(len(model_parts))
        self._post_init(all_params, optimizer_kwargs)
        self.ema = ema
        self.nan_check = nan_check
        self.steps_taken = 0

    def step(self, *args, **kwargs) -> None:
        if self.nan_check and LOSS_WATCH.pop_nonfinite():
            raise NonFiniteLossError(
                f"non-finite training loss after {self.steps_taken} optimizer steps; stopped before "
                "updating the weights (the newest checkpoint on disk is the last good one). "
                "Lower optimizer.lr or raise training.max_norm clipping and resume."
            )
        super().step(*args, **kwargs)
        self.steps_taken += 1
        if self.ema is not None:
            self.ema.update()


def build_aogpt_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager=None):
    job_config = current_job_config()
    if optimizer_config.early_step_in_backward or (ft_manager is not None and ft_manager.enabled):
        # These torchtitan modes build their own containers; keep them, without the extras.
        return build_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager)
    name = optimizer_config.name
    classes = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}
    if name not in classes:
        raise NotImplementedError(f"optimizer.name={name!r} is not supported; allowed: Adam, AdamW")
    impl = optimizer_config.implementation
    kwargs = {
        "lr": optimizer_config.lr,
        "betas": (optimizer_config.beta1, optimizer_config.beta2),
        "eps": optimizer_config.eps,
        "weight_decay": optimizer_config.weight_decay,
        "fused": impl == "fused",
        "foreach": impl == "foreach",
    }
    ema = None
    if job_config is not None and job_config.ema.enable:
        if len(model_parts) != 1:
            raise NotImplementedError("EMA with pipeline-parallel model parts is not supported")
        ema = attach_ema(model_parts[0], job_config.ema.decay, job_config.ema.warmup)
    nan_check = job_config.aogpt.nan_check if job_config is not None else True
    return AOGPTOptimizersContainer(model_parts, classes[name], kwargs, ema=ema, nan_check=nan_check)
