"""AO-GPT as a torchtitan 0.3 model: the shared module tree (model/model.py) behind 0.3's BaseModel.

0.3 builds a model from `ModelSpec.model`, a `BaseModel.Config`: the Trainer calls
`update_from_config(config=trainer_config)`, `build()` under the meta device, `verify_module_protocol()`,
the parallelize_fn, then `init_weights(buffer_device=)`. The tree, its parameter names (so every
checkpoint key) and its init are 0.2.2's: `init_weights`/`init_states` run the authors' init in the
same order with the same random draws, where 0.3's default would call every module's
`reset_parameters` (another distribution, another draw order). The `[ema]` settings travel in the
model Config because 0.3's parallelize_fn receives no job config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torchtitan.protocols import BaseModel
from torchtitan.protocols.model_spec import ModelSpec

from ...model.args import FLAVORS, AOGPTModelArgs
from ...model.model import AOGPT
from .float8 import FLOAT8, Float8

NAME = "aogpt"
_ARG_FIELDS = [f.name for f in dataclasses.fields(AOGPTModelArgs)]


class AOGPTModel(AOGPT, BaseModel):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseModel.Config):
        flavor: str = "debugmodel"
        dim: int = 768
        n_layers: int = 12
        n_heads: int = 12
        vocab_size: int = 50257
        vocab_multiple: int = 64
        max_seq_len: int = 1024
        mlp_ratio: int = 4
        conditioning: str = "adaln"
        target_pe_dim: int = 128
        norm_eps: float = 1e-5
        bias: bool = True
        ema_enable: bool = False
        ema_decay: float = 0.9999
        ema_warmup: bool = True
        float8: Float8 | None = None  # `[quantize.linear.float8]` when model.converters names it

        def args(self) -> AOGPTModelArgs:
            return AOGPTModelArgs(**{k: getattr(self, k) for k in _ARG_FIELDS})

        def update_from_config(self, *, config, **kwargs) -> None:
            """0.2.2's `AOGPTModelArgs.update_from_config` ([aogpt] conditioning, target_pe_dim, the
            tokenizer's vocabulary, the seq_len check) plus the `[ema]` settings."""
            args = self.args()
            view = type("View", (), {})()
            view.aogpt, view.training = config.aogpt, config.training
            view.model = type("Model", (), {"flavor": self.flavor})()
            args.update_from_config(view)
            for k in _ARG_FIELDS:
                setattr(self, k, getattr(args, k))
            self.ema_enable, self.ema_decay, self.ema_warmup = config.ema.enable, config.ema.decay, config.ema.warmup
            self.float8 = config.quantize.linear.float8 if FLOAT8 in config.model.converters else None

        def get_nparams_and_flops(self, model, seq_len: int) -> tuple[int, int]:
            return self.args().get_nparams_and_flops(model, seq_len)

    def __init__(self, config: Config):
        AOGPT.__init__(self, config.args())
        self.ema_config = _EMASettings(config.ema_enable, config.ema_decay, config.ema_warmup)
        self.float8_settings = config.float8  # the parallelize_fn swaps the linears (float8.py)

    def verify_module_protocol(self) -> None:
        """The tree is plain torch.nn; 0.3's Module protocol (per-module init/sharding configs) is unused."""

    def init_weights(self, buffer_device: torch.device | None = None, **kwargs) -> None:
        AOGPT.init_weights(self, buffer_device)

    def init_states(self, *, buffer_device: torch.device | None = None) -> None:
        AOGPT.init_weights(self, buffer_device)


@dataclass(frozen=True)
class _EMASettings:
    """What parallelize.finish_parallelized reads of `[ema]`."""

    enable: bool
    decay: float
    warmup: bool


def model_config(flavor: str) -> AOGPTModel.Config:
    args = FLAVORS[flavor]
    return AOGPTModel.Config(flavor=flavor, **{k: getattr(args, k) for k in _ARG_FIELDS})


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
