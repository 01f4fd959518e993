"""torchtitan `build_optimizers_fn` for AO-GPT: the authors' AdamW groups, EMA updates and the step guard.

* Weight decay only on >= 2-D tensors (matmul weights and embeddings), as the authors do;
  torchtitan's stock container decays biases and norm weights too.
* After every optimizer step the model's EMA (`model.ema`, attached by infra/parallelize.py) is updated.
* Before every optimizer step the guard (loss.py) is asked whether the step's loss was NaN/inf on
  any rank; such a step stops training *before* the weights change, so no checkpoint written later
  holds bad weights and the last good one stays the newest.
"""

from __future__ import annotations

import torch
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers

from .errors import ConfigError
from .loss import NonFiniteLossError, StepGuard


class AOGPTOptimizersContainer(OptimizersContainer):
    def __init__(self, model_parts, optimizer_cls, optimizer_kwargs, guard: StepGuard | None = None):
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
        self.emas = [m.ema for m in model_parts if getattr(m, "ema", None) is not None]
        self.guard = guard
        self.steps_taken = 0

    def step(self, *args, **kwargs) -> None:
        if self.guard is not None and self.guard.enabled and self.guard.pop_nonfinite():
            raise NonFiniteLossError(
                f"non-finite training loss after {self.steps_taken} optimizer steps; stopped before "
                "updating the weights (the newest checkpoint on disk is the last good one). "
                "Lower optimizer.lr or raise training.max_norm clipping and resume."
            )
        super().step(*args, **kwargs)
        self.steps_taken += 1
        for ema in self.emas:
            ema.update()


def build_aogpt_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager=None, *, guard: StepGuard):
    name = optimizer_config.name
    emas = [m for m in model_parts if getattr(m, "ema", None) is not None]
    if optimizer_config.early_step_in_backward or (ft_manager is not None and ft_manager.enabled):
        if emas:
            raise ConfigError(
                "optimizer.early_step_in_backward and fault tolerance build torchtitan's own optimizers, "
                "which never update the EMA; allowed with them: [ema] enable = false"
            )
        return build_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager)
    classes = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}
    if name not in classes:
        raise ConfigError(f"optimizer.name={name!r} is not supported; allowed: Adam, AdamW")
    impl = optimizer_config.implementation
    kwargs = {
        "lr": optimizer_config.lr,
        "betas": (optimizer_config.beta1, optimizer_config.beta2),
        "eps": optimizer_config.eps,
        "weight_decay": optimizer_config.weight_decay,
        "fused": impl == "fused",
        "foreach": impl == "foreach",
    }
    return AOGPTOptimizersContainer(model_parts, classes[name], kwargs, guard=guard)
