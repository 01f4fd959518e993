"""torchtitan 0.2.2's `build_optimizers_fn` / `build_lr_schedulers_fn` for AO-GPT: its containers,
holding the shared rules of optimizers.py (AdamW groups, guard and EMA on the step hooks, the
configured learning rate on resume)."""

from __future__ import annotations

from torchtitan.components.lr_scheduler import LRSchedulersContainer, build_lr_schedulers
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers
from torchtitan.tools.logging import logger

from ..optimizers import (
    OPTIMIZERS,
    check_ema_compatible,
    check_optimizer_name,
    decay_groups,
    hook_guard_and_emas,
    optimizer_kwargs,
    reapply_configured_lr,
    steps_done,
)


class AOGPTOptimizersContainer(OptimizersContainer):
    """torchtitan's container with the authors' weight-decay groups; `step` is torchtitan's own, the
    guard and the EMA run on its step hooks."""

    def __init__(self, model_parts, optimizer_cls, optimizer_kwargs, guard=None):
        all_params = []
        self.optimizers = []
        self.model_parts = model_parts
        for model in model_parts:
            params = [p for p in model.parameters() if p.requires_grad]
            self.optimizers.append(
                optimizer_cls(decay_groups(params, optimizer_kwargs["weight_decay"]), **optimizer_kwargs)
            )
            all_params.extend(params)
        self._validate_length(len(model_parts))
        self._post_init(all_params, optimizer_kwargs)
        self.params = all_params
        self.configured_lr = optimizer_kwargs["lr"]
        self.emas = [m.ema for m in model_parts if getattr(m, "ema", None) is not None]
        self.guard = guard  # the checkpoint save reads its losses and the agreed stop step
        hook_guard_and_emas(self, self.steps_done, self.params, guard, self.emas)

    def steps_done(self) -> int:
        """Optimizer steps taken so far, resumed ones included."""
        return steps_done(self.optimizers[0], self.params) if self.optimizers else 0


class ConfiguredLRSchedulers(LRSchedulersContainer):
    """torchtitan's schedulers, with the configured peak learning rate re-applied after a resume."""

    def __init__(self, base: LRSchedulersContainer, configured_lr: float):
        self.schedulers = base.schedulers
        self.configured_lr = configured_lr

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        for scheduler in self.schedulers:
            saved = reapply_configured_lr(scheduler, self.configured_lr)
            if saved != self.configured_lr:
                logger.info(
                    f"resuming with optimizer.lr={self.configured_lr:g} (the checkpoint was trained with {saved:g})"
                )


def build_aogpt_lr_schedulers(optimizers, lr_scheduler_config, training_steps):
    base = build_lr_schedulers(optimizers, lr_scheduler_config, training_steps)
    lr = getattr(optimizers, "configured_lr", None)
    return base if lr is None else ConfiguredLRSchedulers(base, lr)


def build_aogpt_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager=None, *, guard):
    name = optimizer_config.name
    emas = [m for m in model_parts if getattr(m, "ema", None) is not None]
    fault_tolerant = ft_manager is not None and ft_manager.enabled
    if optimizer_config.early_step_in_backward or fault_tolerant:
        check_ema_compatible(optimizer_config.early_step_in_backward, fault_tolerant, bool(emas))
        return build_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager)
    check_optimizer_name(name)
    return AOGPTOptimizersContainer(model_parts, OPTIMIZERS[name], optimizer_kwargs(optimizer_config), guard=guard)
