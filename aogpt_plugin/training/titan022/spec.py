"""The `aogpt` TrainSpec of torchtitan 0.2.2: what its Trainer builds when `[model] name = "aogpt"`,
and the registration (`aogpt_plugin.training.register`)."""

from __future__ import annotations

import copy
from functools import partial

from torchtitan.protocols.train_spec import TrainSpec, register_train_spec
from torchtitan.protocols.train_spec import _extra_train_specs as _registered

from ...model import AOGPT, FLAVORS
from ..batches import log_l2r_share
from ..console import quiet_known_warnings
from ..loss import recorded_loss
from ..state_dict_adapter import AOGPTStateDictAdapter
from ..step_guard import StepGuard
from ..text_datasets import register_datasets
from .checkpoint import install as install_checkpoint_hook
from .data import build_ao_validator, build_ordered_dataloader, build_tokenizer
from .optimizers import build_aogpt_lr_schedulers, build_aogpt_optimizers
from .parallelize import parallelize_aogpt
from .settings import share_settings

NAME = "aogpt"


class _FreshFlavors(dict):
    """Hands out copies: the Trainer mutates model args in place via update_from_config."""

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(f"model.flavor={key!r} is not an aogpt flavor; allowed: {', '.join(self)}")
        return copy.deepcopy(super().__getitem__(key))


def build_ao_loss(job_config, guard: StepGuard, **unused):
    """torchtitan `build_loss_fn`: the run's loss (../loss.py), recorded by `guard`."""
    return recorded_loss(share_settings(job_config), guard)


def build_metrics_processor(job_config, parallel_dims, model_args=None, tag=None, *, guard: StepGuard):
    """torchtitan's, with the curriculum's share of left-to-right orders beside the training metrics; the
    guard reads its checks at the steps it logs (where torchtitan reads the loss)."""
    from torchtitan.components.metrics import build_metrics_processor as build

    processor = build(job_config, parallel_dims, model_args, tag)
    log_l2r_share(processor, share_settings(job_config))
    guard.reads_at = processor.should_log
    return processor


def get_train_spec() -> TrainSpec:
    guard = StepGuard()  # the loss records into it, the optimizers' step hooks check it
    return TrainSpec(
        model_cls=AOGPT,
        model_args=_FreshFlavors(FLAVORS),
        parallelize_fn=parallelize_aogpt,
        pipelining_fn=None,
        build_optimizers_fn=partial(build_aogpt_optimizers, guard=guard),
        build_lr_schedulers_fn=build_aogpt_lr_schedulers,
        build_dataloader_fn=build_ordered_dataloader,
        build_tokenizer_fn=build_tokenizer,
        build_loss_fn=partial(build_ao_loss, guard=guard),
        build_validator_fn=build_ao_validator,
        build_metrics_processor_fn=partial(build_metrics_processor, guard=guard),
        state_dict_adapter=AOGPTStateDictAdapter,
    )


def register() -> None:
    """Register the `aogpt` TrainSpec and aogpt's datasets, wrap the checkpoint save (checkpoint.py;
    it acts on aogpt runs only) (idempotent), and silence the warnings listed in console.KNOWN_HARMLESS_WARNINGS."""
    from torchtitan.components.checkpoint import CheckpointManager

    quiet_known_warnings()
    register_datasets()
    install_checkpoint_hook(CheckpointManager)  # records, a stop that saves, a full disk named
    if NAME not in _registered:
        register_train_spec(NAME, get_train_spec())
