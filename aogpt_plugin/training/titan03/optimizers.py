"""aogpt's optimizers as a torchtitan 0.3 container: the shared rules of ../optimizers.py (the authors'
AdamW groups, the guard and the EMA on the step hooks) behind 0.3's Configurable.

The Config keeps 0.2.2's flat keys (`--optimizer.lr`, `beta1`, `beta2`, `eps`, `weight_decay`,
`name`, `implementation`): 0.3's stock container replaced them with a `param_groups` list, so
`--optimizer.lr` would be an unknown option and recipes would need index-based keys. Each group
carries `param_names`, which 0.3's optimizer state dict keys by. The guard and the EMA hooks are
hung by the Trainer (trainer.py), which owns the guard the loss records into.

No scheduler wrapper: 0.3 saves only the scheduler's `last_epoch` and recomputes the learning rate
from the optimizer's `base_lrs`, which come from the configured `optimizer.lr`, so
`--checkpoint.load_step N --optimizer.lr X` resumes with X without re-applying it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torchtitan.components.optimizer import OptimizersContainer

from ..ema import clean_fqn
from ..optimizers import OPTIMIZERS, check_optimizer_name, decay_groups, optimizer_kwargs, steps_done


class AOGPTOptimizersContainer(OptimizersContainer):
    @dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        name: str = "AdamW"
        lr: float = 8e-4
        beta1: float = 0.9
        beta2: float = 0.95
        eps: float = 1e-8
        weight_decay: float = 0.1
        implementation: Literal["for-loop", "foreach", "fused"] = "fused"

    def __init__(self, config: Config, *, model_parts, **unused):
        check_optimizer_name(config.name)
        kwargs = optimizer_kwargs(config)
        self.optimizers, self.model_parts, all_params = [], model_parts, []
        for model in model_parts:
            named = [(clean_fqn(n), p) for n, p in model.named_parameters() if p.requires_grad]
            params = [p for _, p in named]
            groups = decay_groups(params, config.weight_decay, [n for n, _ in named])
            self.optimizers.append(OPTIMIZERS[config.name](groups, **kwargs))
            all_params.extend(params)
        self._validate_params(all_params)
        self._post_init(all_params)
        self.params = all_params
        self.configured_lr = config.lr
        self.guard = None  # the Trainer sets it: the checkpoint save reads its losses and stop step

    def steps_done(self) -> int:
        """Optimizer steps taken so far, resumed ones included."""
        return steps_done(self.optimizers[0], self.params) if self.optimizers else 0
