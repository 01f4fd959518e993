"""In-training validation: left-to-right and any-order loss, raw and EMA weights, fixed data.

torchtitan's stock validator scores whatever the next validation batches are, with whatever the
training loss does; for an any-order model that is too noisy to compare checkpoints (torchtitan
#1210). This one tokenizes a fixed set of windows once, draws `aogpt.val_orders` random orders per
window from a fixed seed, and every validation scores exactly those (window, order) pairs plus the
identity order. Numbers are NLL in nats/token over the real vocabulary (likelihood.py shares
the scoring), logged to the console and TensorBoard as

    validation_metrics/loss_l2r, validation_metrics/loss_ao            (raw weights)
    validation_metrics/loss_l2r_ema, validation_metrics/loss_ao_ema    (EMA weights)
    validation_metrics/context_gain[_ema]   NLL of the same targets when every slot reads another
        window's tokens, minus the own NLL (left to right for an l2r-trained model, else the first
        fixed random order): how much the model uses the content
        of its context. An any-order model first sits on a plateau where it knows token frequencies
        and positions only (gain 0); this is the curve that shows it leave.
    validation_metrics/throughput(tps)   tokens scored per second per device by this validation
        (every forward pass's targets, raw and EMA weights; torchtitan's own count was always 0)

The scoring and its logging are here; each version's validator (titan022/, titan03/validator.py) builds
the windows and calls `validate_and_log`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ..data.synthetic import MarkovSource, MarkovSpec
from ..errors import ConfigError
from ..likelihood import nll_sum_and_count, other_context_nlls, token_nlls
from ..seeding import stream_generator
from .progress import Progress

if TYPE_CHECKING:
    from .sections import RunSettings


class FixedValidation:
    """The (window, order) pairs every validation scores, and their scoring with raw and EMA weights."""

    def __init__(self, settings: RunSettings, dp_rank: int, text_windows: Callable[[], object]):
        """`text_windows()`: the validation text packed into windows by torchtitan (not called for the
        synthetic source)."""
        val = settings.validation
        ao = settings.aogpt
        if val.steps < 1:
            raise ConfigError(
                f"validation.steps={val.steps} must be >= 1 for aogpt (a fixed number of batches is scored)"
            )
        self.windows = fixed_windows(settings, dp_rank, text_windows)
        self.batches = []
        for b in range(0, len(self.windows), val.local_batch_size):
            x = torch.stack(self.windows[b : b + val.local_batch_size])
            orders = [
                torch.stack(
                    [
                        torch.randperm(
                            x.shape[1],
                            generator=stream_generator("validation_order", ao.val_order_seed, dp_rank, b + i, k),
                        )
                        for i in range(x.shape[0])
                    ]
                )
                for k in range(ao.val_orders)
            ]
            self.batches.append((x, orders))
        self.val_orders = ao.val_orders
        self.use_ema = settings.ema.enable and settings.ema.validate
        self.l2r_trained = ao.order == "l2r"  # its context gain is read left to right, the order it knows

    def losses(
        self, model, device, context, amp, all_reduce: bool, progress: Progress | None = None, offset: int = 0
    ) -> tuple[dict[str, float], int]:
        """The NLLs over all ranks (`all_reduce`), and how many target tokens this rank's forward passes
        scored; every forward runs under `context()` and `amp`. `progress` hears of each batch done
        (`offset` + its number)."""
        scored = 0
        # l2r sum, l2r n, ao sum, ao n; and for the context gain: own sum, wrong-context sum, n
        totals = torch.zeros(7, dtype=torch.float64, device=device)
        for b, (x, orders) in enumerate(self.batches):
            x = x.to(device)
            with context(), amp:
                s, n = nll_sum_and_count(model, x, None)
                totals[0] += s
                totals[1] += n
                scored += n
                for order in orders:
                    s, n = nll_sum_and_count(model, x, order.to(device))
                    totals[2] += s
                    totals[3] += n
                    scored += n
                if x.shape[0] > 1:  # the same targets, every slot reading another window's tokens
                    order = orders[0].to(device) if orders and not self.l2r_trained else None
                    own = token_nlls(model, x, order)
                    wrong = other_context_nlls(model, x, order)
                    totals[4] += own.double().sum()
                    totals[5] += wrong.double().sum()
                    totals[6] += own.numel()
                    scored += 2 * own.numel()  # two forward passes: own and other windows' context
            if progress is not None:
                progress.update(offset + b + 1)
        if all_reduce:
            dist.all_reduce(totals)
        t = totals.tolist()
        out = {"l2r": t[0] / t[1]}
        if t[3] > 0:
            out["ao"] = t[2] / t[3]
        if t[6] > 0:
            out["context_gain"] = (t[5] - t[4]) / t[6]
        return out, scored

    def passes(self, model) -> int:
        """How many times validation runs over its batches: the raw weights, and the EMA ones with `[ema] validate`."""
        return 2 if self.use_ema and getattr(model, "ema", None) is not None else 1

    def announce(self, step: int, model) -> str:
        """The line a validation opens with: what it scores and how much (it may take minutes on a CPU)."""
        forwards = sum(1 + len(orders) + (2 if x.shape[0] > 1 else 0) for x, orders in self.batches)
        tokens = sum(x.numel() for x, _ in self.batches)
        weights = "raw and EMA weights" if self.passes(model) == 2 else "raw weights"
        return (
            f"aogpt validation at step {step}: {len(self.batches)} batches, {tokens:,} tokens per rank, "
            f"{forwards * self.passes(model)} forward passes ({weights})"
        )

    @torch.no_grad()
    def metrics(self, model, device, context, amp, all_reduce: bool, log=None) -> tuple[dict[str, float], int]:
        """`validation_metrics/...` of the raw weights and, with `[ema] validate`, of the EMA weights
        (model in eval mode meanwhile), and the target tokens scored; with `log`, a progress line every
        ~10 s (progress.py)."""
        model.eval()
        total = len(self.batches) * self.passes(model)
        progress = Progress("aogpt validation batch", total, "batches", log=log) if log is not None else None
        losses, scored = self.losses(model, device, context, amp, all_reduce, progress)
        metrics = {_tag(k): v for k, v in losses.items()}
        ema = getattr(model, "ema", None)
        if self.passes(model) == 2:
            with ema.swapped():
                losses, ema_scored = self.losses(model, device, context, amp, all_reduce, progress, len(self.batches))
                scored += ema_scored
                for k, v in losses.items():
                    metrics[_tag(k) + "_ema"] = v
        model.train()
        return metrics, scored

    def describe(self, seq_len: int) -> str:
        """The line each validator logs once, when built."""
        return (
            f"aogpt validation: {len(self.windows)} fixed windows of {seq_len} tokens per rank, "
            f"{self.val_orders} fixed random orders each + left-to-right"
        )

    @torch.no_grad()
    def validate_and_log(self, model, device, context, amp, all_reduce: bool, step: int, metrics_processor, log):
        """Score, log through torchtitan's metrics processor (console + TensorBoard) with this
        validation's throughput, and `log` the metrics on one console line."""
        log("%s", self.announce(step, model))
        start = time.perf_counter()
        metrics, scored = self.metrics(model, device, context, amp, all_reduce, lambda line: log("%s", line))
        headline = metrics.get("validation_metrics/loss_ao", metrics["validation_metrics/loss_l2r"])
        _log_with_own_throughput(metrics_processor, headline, step, metrics, scored, start)
        log("aogpt validation step %d: %s", step, "  ".join(f"{k.split('/')[-1]}={v:.4f}" for k, v in metrics.items()))


def _log_with_own_throughput(mp, loss: float, step: int, metrics: dict, scored: int, start: float) -> None:
    """torchtitan's log_validation divides the tokens counted since its last log by the time since:
    right after the training log that is 0 tokens, so its tps was always 0. Hand it this
    validation's tokens and start time, then give the training counters back, less the
    validation's time, so the next training tps neither loses tokens nor counts validation."""
    train_tokens, train_since = mp.ntokens_since_last_log, mp.time_last_log
    mp.ntokens_since_last_log, mp.time_last_log = scored, start
    mp.log_validation(loss=loss, step=step, extra_metrics=metrics)
    mp.ntokens_since_last_log = train_tokens
    mp.time_last_log = train_since + (time.perf_counter() - start)


def fixed_windows(settings: RunSettings, dp_rank: int, text_windows: Callable[[], object]) -> list[torch.Tensor]:
    """This rank's `validation.steps * local_batch_size` windows: from the synthetic source's own stream
    (never the training one) or the first windows of the validation text."""
    val = settings.validation
    wanted = val.steps * val.local_batch_size
    if val.dataset == "synthetic":
        source = MarkovSource(MarkovSpec.parse(val.dataset_path, "validation.dataset_path"))
        g = stream_generator("synthetic_validation", source.spec.seed, dp_rank)
        return list(source.sample(wanted, val.seq_len, g))
    windows = []
    for input_dict, _ in text_windows():
        windows.append(input_dict["input"])
        if len(windows) == wanted:
            break
    if len(windows) < wanted:
        raise ConfigError(
            f"validation.steps={val.steps} x validation.local_batch_size={val.local_batch_size} "
            f"needs {wanted} windows of {val.seq_len} tokens per rank, but the validation data "
            f"({val.dataset}, {val.dataset_path}) has only {len(windows)}"
        )
    return windows


def _tag(key: str) -> str:
    return f"validation_metrics/{key}" if key == "context_gain" else f"validation_metrics/loss_{key}"
