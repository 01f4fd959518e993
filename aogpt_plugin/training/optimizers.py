"""What aogpt's optimizers do, whichever torchtitan container holds them: the authors' AdamW groups,
the step guard and the EMA on the optimizer's step hooks, and the configured learning rate on resume.

* Weight decay only on >= 2-D tensors (matmul weights and embeddings), as the authors do;
  torchtitan's stock container decays biases and norm weights too.
* The guard and the EMA hang off torch's `Optimizer.register_step_pre_hook` / `post_hook` (torchtitan's
  containers are torch Optimizers): before every step the guard (step_guard.py) checks the step's loss
  and gradients on every rank, after it the new weights, then the model's EMA (`model.ema`, attached
  by parallelize.py) is updated, all on the device: the hooks read nothing on the host but at the
  guard's reading steps (a bad step raises NonFiniteStepError there, and before any checkpoint). After
  the update, a progress line when ~10 s have passed since the last (progress.py: the host's clock only).
  The hooks are registered when the container is built, so they run before any hook torchtitan's
  Trainer registers afterwards (the float8 amax/scale precompute).
* The EMA starts at the weights the optimizer starts from: torchtitan builds the optimizers right
  after `init_weights` and before a checkpoint is loaded, so the model itself never knows of the EMA.
* On resume torchtitan restores the scheduler's base learning rate from the checkpoint, which would
  silently ignore `--optimizer.lr`; `reapply_configured_lr` puts the configured peak back at the
  resumed position of the schedule, so `--checkpoint.load_step N --optimizer.lr X` resumes step N
  with learning rate X.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .progress import Progress

OPTIMIZERS = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}


def check_optimizer_name(name: str) -> None:
    """The optimizers aogpt builds; preflight asks before any process group, the builder again."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"optimizer.name={name!r} is not supported; allowed: {', '.join(OPTIMIZERS)}")


def check_ema_compatible(early_step_in_backward: bool, fault_tolerant: bool, ema_enabled: bool) -> None:
    """torchtitan builds its own optimizers for these two, which never update the EMA."""
    if ema_enabled and (early_step_in_backward or fault_tolerant):
        what = "optimizer.early_step_in_backward=true" if early_step_in_backward else "fault tolerance"
        raise ConfigError(
            f"{what} builds torchtitan's own optimizers, which never update the EMA; allowed with it: "
            "[ema] enable = false"
        )


def optimizer_kwargs(config) -> dict:
    """torch.optim keyword arguments of an `[optimizer]` section (lr, beta1, beta2, eps, weight_decay,
    implementation), read the same way by both versions' containers."""
    impl = config.implementation
    return {
        "lr": config.lr,
        "betas": (config.beta1, config.beta2),
        "eps": config.eps,
        "weight_decay": config.weight_decay,
        "fused": impl == "fused",
        "foreach": impl == "foreach",
    }


def decay_groups(params: list[torch.Tensor], weight_decay: float, names: list[str] | None = None) -> list[dict]:
    """The authors' parameter groups: decay on >= 2-D tensors, none on biases and norm weights. With
    `names` (one per parameter) each group also carries its `param_names`, which torchtitan 0.3's
    optimizer state dict keys by."""
    groups = []
    for decayed, wd in ((True, weight_decay), (False, 0.0)):
        chosen = [i for i, p in enumerate(params) if (p.ndim >= 2) == decayed]
        group = {"params": [params[i] for i in chosen], "weight_decay": wd}
        if names is not None:
            group["param_names"] = [names[i] for i in chosen]
        groups.append(group)
    return groups


def steps_done(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> int:
    """Optimizer steps taken so far, resumed ones included (AdamW's own per-parameter count)."""
    state = optimizer.state.get(params[0], {}) if params else {}
    return int(state["step"]) if "step" in state else 0


def hook_guard_and_emas(container: torch.optim.Optimizer, count_steps, params, guard, emas) -> None:
    """Start `emas` at the current weights and hang the guard's checks and the EMA updates off
    `container`'s step hooks. `count_steps()` is the steps taken so far; `guard` may be None."""
    for ema in emas:
        ema.reset()
    step_in_flight: list[int | None] = [None]  # counted on the host: AdamW's own count may live on the device
    progress: list[Progress | None] = [None]  # a line every ~10 s: step i/N, steps/s, the time left

    def before_step(optimizer, args, kwargs) -> None:
        # the count is read once, at the first step (after a resumed checkpoint has loaded)
        first = step_in_flight[0] is None
        step_in_flight[0] = (count_steps() if first else step_in_flight[0]) + 1
        if first and guard is not None and guard.last_step is not None:  # the run's last step, set by the loss
            progress[0] = Progress("step", guard.last_step, "steps", done=step_in_flight[0] - 1)
        if guard is not None:
            guard.check_before_step(params, step_in_flight[0])

    def after_step(optimizer, args, kwargs) -> None:
        if guard is not None:
            guard.check_after_step(params, step_in_flight[0])
        for ema in emas:
            ema.update()
        if progress[0] is not None:
            progress[0].update(step_in_flight[0])

    container.register_step_pre_hook(before_step)
    container.register_step_post_hook(after_step)
    if guard is not None:  # SIGTERM / Ctrl-C now finish the step and save (stop_request.py)
        guard.stop.install()


def reapply_configured_lr(scheduler, configured_lr: float) -> float:
    """After a resumed LambdaLR's state is loaded: its peak becomes `configured_lr`, at the same point of
    the schedule, in the scheduler and its optimizer's groups. Returns the peak the checkpoint had."""
    saved = scheduler.base_lrs[0]
    scheduler.base_lrs = [configured_lr] * len(scheduler.base_lrs)
    lrs = [base * f(scheduler.last_epoch) for f, base in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"], group["initial_lr"] = lr, configured_lr
    scheduler._last_lr = lrs
    return saved
