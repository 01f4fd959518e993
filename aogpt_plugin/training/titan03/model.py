"""AO-GPT as a torchtitan 0.3 model: the shared module tree (model/model.py) behind 0.3's BaseModel.

0.3 builds a model from `ModelSpec.model`, a `BaseModel.Config`: the Trainer calls
`update_from_config(config=trainer_config)`, `build()` under the meta device, `verify_module_protocol()`,
the parallelize_fn, then `init_weights(buffer_device=)`. The tree, its parameter names (so every
checkpoint key) and its init are 0.2.2's: `init_weights`/`init_states` run the authors' init in the
same order with the same random draws, where 0.3's default would call every module's
`reset_parameters` (another distribution, another draw order). The Config holds the flavor's model
args (model/args.py owns them and their defaults) and the run's settings (RunSettings,
../sections.py), handed in by the Trainer: 0.3's parallelize_fn receives no job config, so the model
carries `[ema]` and float8 to it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torchtitan.protocols import BaseModel
from torchtitan.protocols.model_spec import ModelSpec

from ...model.args import FLAVORS, AOGPTModelArgs
from ...model.model import AOGPT
from ..sections import Float8, SettingsField
from .float8 import FLOAT8

NAME = "aogpt"


class AOGPTModel(AOGPT, BaseModel):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseModel.Config):
        flavor: str
        args: AOGPTModelArgs
        """The flavor's model args, updated from the run's settings by `update_from_config`."""

        settings: SettingsField = None

        @property
        def float8(self) -> Float8 | None:
            """`[quantize.linear.float8]` when model.converters names it (the parallelize_fn swaps the linears)."""
            settings = self.settings
            return settings.float8 if settings is not None and FLOAT8 in settings.model.converters else None

        def update_from_config(self, *, config, **kwargs) -> None:
            """0.2.2's `AOGPTModelArgs.update_from_config` on the run's settings: `[aogpt]` conditioning,
            target_pe_dim, the tokenizer's vocabulary, the seq_len check."""
            self.args.update_from_config(self.settings)

        def get_nparams_and_flops(self, model, seq_len: int) -> tuple[int, int]:
            return self.args.get_nparams_and_flops(model, seq_len)

    def __init__(self, config: Config):
        AOGPT.__init__(self, config.args)
        self.settings = config.settings  # `[ema]`: the parallelize_fn attaches the EMA (parallelize.py)
        self.float8_settings = config.float8  # the parallelize_fn swaps the linears (float8.py)

    def verify_module_protocol(self) -> None:
        """The tree is plain torch.nn; 0.3's Module protocol (per-module init/sharding configs) is unused."""

    def init_weights(self, buffer_device: torch.device | None = None, **kwargs) -> None:
        AOGPT.init_weights(self, buffer_device)

    def init_states(self, *, buffer_device: torch.device | None = None) -> None:
        AOGPT.init_weights(self, buffer_device)


def model_config(flavor: str) -> AOGPTModel.Config:
    return AOGPTModel.Config(flavor=flavor, args=dataclasses.replace(FLAVORS[flavor]))


def model_registry(flavor: str) -> ModelSpec:
    """The ModelSpec of `flavor` (a fresh Config each call: the Trainer updates it in place)."""
    from ..state_dict_adapter import AOGPTStateDictAdapter
    from .parallelize import parallelize_aogpt

    return ModelSpec(
        name=NAME,
        flavor=flavor,
        model=model_config(flavor),
        parallelize_fn=parallelize_aogpt,
        pipelining_fn=None,
        post_optimizer_build_fn=None,
        state_dict_adapter=AOGPTStateDictAdapter,
    )
