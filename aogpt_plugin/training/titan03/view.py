"""The 0.2.2-shaped view of a torchtitan 0.3 config: what the shared rules read.

The preflight (../preflight.py), the checkpoint record (../checkpoint_record.py) and the launcher's
messages (../launcher.py) read a job config the way recipes spell it (`job.dump_folder`,
`training.dataset`, `validation.seq_len`, `model.flavor`, ...). Under 0.3 those keys live elsewhere
(`dump_folder`, `dataloader.dataset`, `validator.val_seq_len`, `model_spec.flavor`); this view puts
them back under the recipe's names, reading the live 0.3 config, so every rule has one spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..config_checks import CUSTOM_CONFIG_MODULE


@dataclass
class JobView:
    """A dataclass so that check_types walks it: `[aogpt]` and `[ema]` are the shared dataclasses and
    are type-checked; the other sections are plain namespaces (0.3 checks their types itself)."""

    job: Any
    model: Any
    training: Any
    validation: Any
    optimizer: Any
    lr_scheduler: Any
    parallelism: Any
    checkpoint: Any
    compile: Any
    quantize: Any
    aogpt: Any
    ema: Any


def _section(obj, **extra) -> SimpleNamespace:
    names = getattr(obj, "__dataclass_fields__", {})
    return SimpleNamespace(**{k: getattr(obj, k) for k in names}, **extra)


def job_view(config) -> JobView:
    t, v, ns = config.training, config.validator, SimpleNamespace
    o = config.optimizer
    return JobView(
        job=ns(dump_folder=config.dump_folder, custom_config_module=CUSTOM_CONFIG_MODULE),
        model=ns(name="aogpt", flavor=config.model_spec.flavor, converters=list(config.model.converters)),
        training=_section(t, dataset=config.dataloader.dataset, dataset_path=config.dataloader.dataset_path),
        validation=ns(
            enable=v.enable,
            dataset=v.dataloader.dataset,
            dataset_path=v.dataloader.dataset_path,
            seq_len=v.val_seq_len or t.seq_len,
            local_batch_size=v.val_local_batch_size or t.local_batch_size,
            steps=v.steps,
            freq=v.freq,
        ),
        optimizer=ns(
            name=o.name,
            lr=o.lr,
            beta1=o.beta1,
            beta2=o.beta2,
            eps=o.eps,
            weight_decay=o.weight_decay,
            implementation=o.implementation,
            early_step_in_backward=False,
        ),
        lr_scheduler=_section(config.lr_scheduler),
        parallelism=_section(config.parallelism),
        checkpoint=_section(config.checkpoint),
        compile=_section(config.compile),
        quantize=config.quantize,
        aogpt=config.aogpt,
        ema=config.ema,
    )
