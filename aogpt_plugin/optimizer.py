"""torchtitan `build_optimizers_fn` / `build_lr_schedulers_fn` for AO-GPT: the authors' AdamW groups,
EMA updates, the step guard, and a learning rate that follows the config on resume.

* Weight decay only on >= 2-D tensors (matmul weights and embeddings), as the authors do;
  torchtitan's stock container decays biases and norm weights too.
* Before every optimizer step the guard (loss.py) checks the step's loss and gradients on every rank,
  after it the new weights; a bad step stops training before anything is written (NonFiniteStepError).
* After every optimizer step the model's EMA (`model.ema`, attached by infra/parallelize.py) is updated.
* On resume torchtitan restores the scheduler's base learning rate from the checkpoint, which would
  silently ignore `--optimizer.lr`. The scheduler here re-applies the configured peak learning rate
  at the resumed position of the schedule, so `--checkpoint.load_step N --optimizer.lr X` resumes
  step N with learning rate X.
"""

from __future__ import annotations

import torch
from torchtitan.components.lr_scheduler import LRSchedulersContainer, build_lr_schedulers
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers
from torchtitan.tools.logging import logger

from .errors import ConfigError
from .loss import StepGuard

OPTIMIZERS = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}


def check_optimizer_name(name: str) -> None:
    """The optimizers this container builds; preflight asks before any process group, the builder again."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"optimizer.name={name!r} is not supported; allowed: {', '.join(OPTIMIZERS)}")


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
        self.params = all_params
        self.configured_lr = optimizer_kwargs["lr"]
        self.emas = [m.ema for m in model_parts if getattr(m, "ema", None) is not None]
        self.guard = guard
        if guard is not None:  # SIGTERM / Ctrl-C now finish the step and save (stop_request.py)
            guard.stop.install()

    def steps_done(self) -> int:
        """Optimizer steps taken so far, resumed ones included (AdamW's own per-parameter count)."""
        state = self.optimizers[0].state.get(self.params[0], {}) if self.params else {}
        return int(state["step"]) if "step" in state else 0

    def step(self, *args, **kwargs) -> None:
        step = self.steps_done() + 1
        if self.guard is not None:
            self.guard.check_before_step(self.params, step)
        super().step(*args, **kwargs)
        if self.guard is not None:
            self.guard.check_after_step(self.params, step)
        for ema in self.emas:
            ema.update()


class ConfiguredLRSchedulers(LRSchedulersContainer):
    """torchtitan's schedulers, with the configured peak learning rate re-applied after a resume."""

    def __init__(self, base: LRSchedulersContainer, configured_lr: float):
        self.schedulers = base.schedulers
        self.configured_lr = configured_lr

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        for scheduler in self.schedulers:
            saved = scheduler.base_lrs[0]
            if saved != self.configured_lr:
                logger.info(
                    f"resuming with optimizer.lr={self.configured_lr:g} (the checkpoint was trained with {saved:g})"
                )
            scheduler.base_lrs = [self.configured_lr] * len(scheduler.base_lrs)
            lrs = [
                base * f(scheduler.last_epoch) for f, base in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)
            ]
            for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
                group["lr"], group["initial_lr"] = lr, self.configured_lr
            scheduler._last_lr = lrs


def build_aogpt_lr_schedulers(optimizers, lr_scheduler_config, training_steps):
    base = build_lr_schedulers(optimizers, lr_scheduler_config, training_steps)
    lr = getattr(optimizers, "configured_lr", None)
    return base if lr is None else ConfiguredLRSchedulers(base, lr)


def check_ema_compatible(early_step_in_backward: bool, fault_tolerant: bool, ema_enabled: bool) -> None:
    """torchtitan builds its own optimizers for these two, which never update the EMA."""
    if ema_enabled and (early_step_in_backward or fault_tolerant):
        what = "optimizer.early_step_in_backward=true" if early_step_in_backward else "fault tolerance"
        raise ConfigError(
            f"{what} builds torchtitan's own optimizers, which never update the EMA; allowed with it: "
            "[ema] enable = false"
        )


def build_aogpt_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager=None, *, guard: StepGuard):
    name = optimizer_config.name
    emas = [m for m in model_parts if getattr(m, "ema", None) is not None]
    fault_tolerant = ft_manager is not None and ft_manager.enabled
    if optimizer_config.early_step_in_backward or fault_tolerant:
        check_ema_compatible(optimizer_config.early_step_in_backward, fault_tolerant, bool(emas))
        return build_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager)
    check_optimizer_name(name)
    impl = optimizer_config.implementation
    kwargs = {
        "lr": optimizer_config.lr,
        "betas": (optimizer_config.beta1, optimizer_config.beta2),
        "eps": optimizer_config.eps,
        "weight_decay": optimizer_config.weight_decay,
        "fused": impl == "fused",
        "foreach": impl == "foreach",
    }
    return AOGPTOptimizersContainer(model_parts, OPTIMIZERS[name], kwargs, guard=guard)
