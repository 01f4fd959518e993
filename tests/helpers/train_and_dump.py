"""Test driver: run torchtitan's Trainer on aogpt (CPU), record losses, dump the trained model's logits.

Usage (under torchrun): train_and_dump.py OUT.pt [--nan-at-step K] -- <torchtitan args>
Writes on rank 0: {"losses": {step: loss}, "val": {step: metrics}, "logits_raw", "logits_ema", "tokens", "order"}.
`--nan-at-step K` makes the model output NaN at training step K (fault injection for the NaN guard).
"""

import os
import sys

import torch

from aogpt_plugin.training.cpu import has_accelerator
from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu


def main() -> None:
    out_path = sys.argv[1]
    rest = sys.argv[2:]
    nan_step = None
    if rest[:1] == ["--nan-at-step"]:
        nan_step, rest = int(rest[1]), rest[2:]
    assert rest[0] == "--"
    argv = rest[1:]
    if not has_accelerator():
        enable_torchtitan_on_cpu()
    import aogpt_plugin

    aogpt_plugin.register()
    import torchtitan.train as titan
    from torchtitan.tools.logging import init_logger

    from aogpt_plugin.training.preflight import check_settings
    from aogpt_plugin.training.titan022.config_parser import parse_job_config, registered_names
    from aogpt_plugin.training.titan022.settings import share_settings

    init_logger()
    config = parse_job_config(argv)
    check_settings(
        share_settings(config), int(os.environ.get("WORLD_SIZE", "1")), **registered_names()
    )  # as the launcher does
    trainer = titan.Trainer(config)
    losses, val = {}, {}
    orig_log = trainer.metrics_processor.log

    def log(step, global_avg_loss, *args, **kwargs):
        losses[step] = float(global_avg_loss)
        return orig_log(step, global_avg_loss, *args, **kwargs)

    trainer.metrics_processor.log = log
    orig_val = trainer.metrics_processor.log_validation

    def log_validation(loss, step, extra_metrics=None):
        val[step] = {k: float(v) for k, v in (extra_metrics or {}).items()}
        return orig_val(loss=loss, step=step, extra_metrics=extra_metrics)

    trainer.metrics_processor.log_validation = log_validation
    model = trainer.model_parts[0]
    if nan_step is not None:
        model.register_forward_hook(lambda m, i, o: o * float("nan") if trainer.step == nan_step else o)
    try:
        trainer.train()
        g = torch.Generator().manual_seed(0)
        n = config.training.seq_len
        tokens = torch.randint(0, 50257, (2, n), generator=g)
        order = torch.stack([torch.randperm(n, generator=g) for _ in range(2)])
        model.eval()
        device = trainer.device  # the trained model's device (cuda:N on a GPU)
        with torch.no_grad():
            logits_raw = model(tokens.to(device), order=order.to(device)).float().cpu()
            logits_ema = None
            if hasattr(model, "ema"):
                with model.ema.swapped():
                    logits_ema = model(tokens.to(device), order=order.to(device)).float().cpu()
        if torch.distributed.get_rank() == 0:
            torch.save(
                {
                    "losses": losses,
                    "val": val,
                    "logits_raw": logits_raw,
                    "logits_ema": logits_ema,
                    "tokens": tokens,
                    "order": order,
                },
                out_path,
            )
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
