"""float8 training of aogpt's linears on torchtitan 0.3, with 0.2.2's keys and meaning.

0.3's `Float8LinearConverter` rewrites the `Linear.Config` entries of a model's Config tree; aogpt's
module tree is plain torch.nn (model/model.py), so that converter would find nothing to convert.
Here the recipe's `model.converters = ["quantize.linear.float8"]` and `[quantize.linear.float8]` keep
the names and meaning 0.2.2 gave them (`torchtitan/components/quantization/float8.py` of 0.2.2):
torchao's `convert_to_float8_training` swaps every nn.Linear whose dims are multiples of 16 and whose
name matches none of `filter_fqns` (`auto_filter_small_kn`: torchao's size filter), tensorwise scaling
unless `recipe_name` is set, float8 all-gather only under FSDP, and the scale precompute after each
optimizer step when asked. The swap happens in the parallelize_fn, before activation checkpointing,
compile and FSDP, where 0.2.2's model build put it. The rules that refuse a setting (emulate with
compile, a recipe with float8 all-gather, no SM89 GPU without emulate) live in ../preflight.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch.nn as nn

FLOAT8 = "quantize.linear.float8"
CONVERTERS = (FLOAT8,)  # the model converters aogpt runs on 0.3
AUTO_FILTER = "auto_filter_small_kn"


@dataclass
class Float8Config:
    enable_fsdp_float8_all_gather: bool = False
    """All-gather float8 weights under FSDP (tensorwise scaling)."""

    precompute_float8_dynamic_scale_for_fsdp: bool = False
    """Precompute the FSDP float8 scales after each optimizer step (with the all-gather)."""

    recipe_name: str | None = None
    """torchao recipe (tensorwise, rowwise, rowwise_with_gw_hp); None: tensorwise with the keys above."""

    filter_fqns: list[str] = field(default_factory=list)
    """Linears whose name contains one of these stay in high precision (`auto_filter_small_kn`: torchao's size rule)."""

    emulate: bool = False
    """Emulated float8 matmuls (any device, eager only): for tests."""

    def __post_init__(self) -> None:
        self.filter_fqns = _names(self.filter_fqns)


@dataclass
class QuantizeLinear:
    float8: Float8Config = field(default_factory=Float8Config)


@dataclass
class Quantize:
    linear: QuantizeLinear = field(default_factory=QuantizeLinear)


@dataclass
class ModelConverters:
    converters: list[str] = field(default_factory=list)
    """Model converters by name; aogpt on 0.3: quantize.linear.float8."""

    def __post_init__(self) -> None:
        self.converters = _names(self.converters)


def _names(values) -> list[str]:
    """A list option as 0.2.2 spelled it on the command line too: `a,b` is two names."""
    return [name for value in values for name in str(value).split(",") if name]


def _linear_filter(module: nn.Module, fqn: str, filter_fqns: list[str]) -> bool:
    if not isinstance(module, nn.Linear):
        return False
    out_features, in_features = module.weight.shape
    return out_features % 16 == 0 and in_features % 16 == 0 and not any(f in fqn for f in filter_fqns)


def convert_to_float8(model: nn.Module, float8, fsdp: bool) -> bool:
    """Swap `model`'s eligible linears to torchao Float8Linear in place, as the run's `float8` settings
    (sections.Float8) say; True when the FSDP scale
    precompute should run after every optimizer step."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    filter_fqns = [f for f in float8.filter_fqns if f != AUTO_FILTER]
    if AUTO_FILTER in float8.filter_fqns:
        from torchao.float8 import _auto_filter_for_recipe

        module_filter = _auto_filter_for_recipe(float8.recipe_name or "tensorwise", filter_fqns=filter_fqns)
    else:
        module_filter = partial(_linear_filter, filter_fqns=filter_fqns)
    if float8.recipe_name is not None:
        config, precompute = Float8LinearConfig.from_recipe_name(float8.recipe_name), False
    else:
        all_gather = fsdp and float8.enable_fsdp_float8_all_gather
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=all_gather, emulate=float8.emulate)
        precompute = all_gather and float8.precompute_float8_dynamic_scale_for_fsdp
    convert_to_float8_training(model, config=config, module_filter_fn=module_filter)
    return precompute


def hook_scale_precompute(optimizers, model: nn.Module) -> None:
    """After every optimizer step, the float8 scales FSDP's next all-gather uses (0.2.2's post_optimizer_hook)."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    optimizers.register_step_post_hook(lambda *args, **kwargs: precompute_float8_dynamic_scale_for_fsdp(model))
