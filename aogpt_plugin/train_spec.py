"""The `aogpt` TrainSpec: what torchtitan's Trainer builds when `[model] name = "aogpt"`."""

from __future__ import annotations

import copy
from functools import partial

from torchtitan.components.lr_scheduler import build_lr_schedulers
from torchtitan.protocols.train_spec import TrainSpec, register_train_spec
from torchtitan.protocols.train_spec import _extra_train_specs as _registered

from .data.tokenizer import TiktokenTokenizer
from .dataloader import build_ordered_dataloader, register_datasets
from .infra.parallelize import parallelize_aogpt
from .loss import StepGuard, build_ao_loss
from .model import AOGPT, FLAVORS
from .model.state_dict_adapter import AOGPTStateDictAdapter
from .optimizer import build_aogpt_optimizers
from .validate import build_ao_validator

NAME = "aogpt"


class _FreshFlavors(dict):
    """Hands out copies: the Trainer mutates model args in place via update_from_config."""

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(f"model.flavor={key!r} is not an aogpt flavor; allowed: {', '.join(self)}")
        return copy.deepcopy(super().__getitem__(key))


def build_tokenizer(job_config) -> TiktokenTokenizer:
    return TiktokenTokenizer(job_config.aogpt.tokenizer)


def get_train_spec() -> TrainSpec:
    guard = StepGuard()  # the loss records into it, the optimizers check it before every step
    return TrainSpec(
        model_cls=AOGPT,
        model_args=_FreshFlavors(FLAVORS),
        parallelize_fn=parallelize_aogpt,
        pipelining_fn=None,
        build_optimizers_fn=partial(build_aogpt_optimizers, guard=guard),
        build_lr_schedulers_fn=build_lr_schedulers,
        build_dataloader_fn=build_ordered_dataloader,
        build_tokenizer_fn=build_tokenizer,
        build_loss_fn=partial(build_ao_loss, guard=guard),
        build_validator_fn=build_ao_validator,
        state_dict_adapter=AOGPTStateDictAdapter,
    )


def register() -> None:
    """Register the `aogpt` TrainSpec and the `openwebtext` / `local` datasets (idempotent)."""
    register_datasets()
    if NAME not in _registered:
        register_train_spec(NAME, get_train_spec())
