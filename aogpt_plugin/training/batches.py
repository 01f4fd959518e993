"""Orders into the batch: the packed text stream, each window read in an order sigma.

torchtitan yields ({"input": x[:-1]}, x[1:]) from windows of seq_len+1 tokens; AO training needs
the n tokens themselves, so the wrapper keeps `input` (n tokens) and replaces the shifted label
by x[sigma]. What reaches `model(input, order=order)` and the loss:

    ({"input": x, "order": sigma}, x[sigma])

and under `[aogpt] loss_path = "fused"` the labels go to the model too, which returns the summed loss itself
(model.py's fused head): ({"input": x, "order": sigma, "labels": x[sigma]}, x[sigma]).

The order stream index is part of the dataloader state, so a resumed run draws the same orders;
under `[aogpt] l2r_curriculum_steps` the index also gives the step whose share of left-to-right
orders a sequence is drawn with (orders.L2RCurriculum), which `log_l2r_share` puts beside the
training metrics (TensorBoard `aogpt/l2r_share`).
With `[aogpt] shuffle_windows = K` the windows pass through a buffer of K first: each yield takes a
seeded random slot of the buffer and refills it with the next window, so a batch is a random draw
from K consecutive windows instead of a run of them; the buffer is in the state too (exact resume).
Each version's glue (titan022/data.py, titan03/data.py) builds the base stream and the
dataloader around these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset

from ..data.synthetic import MarkovSource
from ..orders import L2RCurriculum, OrderSampler
from ..seeding import stream_generator

if TYPE_CHECKING:
    from .sections import RunSettings


class OrderedTextDataset(IterableDataset, Stateful):
    def __init__(
        self,
        base,
        sampler: OrderSampler,
        stream: int,
        shuffle_windows: int = 0,
        seed: int = 0,
        labels_to_model: bool = False,
    ):
        self.base, self.sampler, self.stream = base, sampler, stream
        self.shuffle_windows, self.seed = shuffle_windows, seed
        self.labels_to_model = labels_to_model  # the fused loss path: the model's forward takes the labels
        self._index = 0  # sequences drawn so far on this stream
        self._buffer: list = []  # windows waiting to be drawn (shuffle_windows > 0)

    def _windows(self):
        for input_dict, _shifted in self.base:
            x = input_dict["input"]
            if not self.shuffle_windows:
                yield x
            elif len(self._buffer) < self.shuffle_windows:
                self._buffer.append(x)
            else:
                g = stream_generator("train_shuffle", self.seed, self.stream, self._index)
                slot = int(torch.randint(self.shuffle_windows, (1,), generator=g))
                x, self._buffer[slot] = self._buffer[slot], x
                yield x

    def __iter__(self):
        for x in self._windows():
            order = self.sampler.sample(self.stream, self._index)
            self._index += 1
            labels = x[order]
            yield (
                (
                    {"input": x, "order": order, "labels": labels}
                    if self.labels_to_model
                    else {"input": x, "order": order}
                ),
                labels,
            )

    def state_dict(self):
        state = {"base": self.base.state_dict(), "order_index": self._index}
        if self.shuffle_windows:
            state["buffer"] = [t.clone() for t in self._buffer]
        return state

    def load_state_dict(self, state_dict):
        self.base.load_state_dict(state_dict["base"])
        self._index = state_dict["order_index"]
        self._buffer = list(state_dict.get("buffer", []))


class SyntheticWindows(IterableDataset, Stateful):
    """`--training.dataset synthetic`: sequences drawn from a known-entropy source (data/synthetic.py)
    instead of text, shaped like torchtitan's text windows. Sequence i of rank r is a pure function of
    (source seed, r, i), so a resumed run draws what an uninterrupted one would."""

    CHUNK = 256  # sequences drawn per generator call

    def __init__(self, source: MarkovSource, seq_len: int, dp_rank: int):
        self.source, self.seq_len, self.dp_rank = source, seq_len, dp_rank
        self._index = 0

    def __iter__(self):
        while True:
            chunk, offset = divmod(self._index, self.CHUNK)
            g = stream_generator("synthetic_train", self.source.spec.seed, self.dp_rank, chunk)
            rows = self.source.sample(self.CHUNK, self.seq_len, g)
            for x in rows[offset:]:
                self._index += 1
                yield {"input": x}, x

    def state_dict(self):
        return {"index": self._index}

    def load_state_dict(self, state_dict):
        self._index = state_dict["index"]


L2R_SHARE = "aogpt/l2r_share"  # the metric (TensorBoard tag) of the curriculum's share


def curriculum_from_config(settings: RunSettings, dp_world_size: int) -> L2RCurriculum:
    """`[aogpt]`'s curriculum, with the sequences one rank draws per optimizer step (micro-batches included:
    training.global_batch_size split over the data-parallel ranks)."""
    ao, training = settings.aogpt, settings.training
    per_step = training.global_batch_size // dp_world_size if training.global_batch_size > 0 else None
    return L2RCurriculum(ao.l2r_curriculum_steps, ao.l2r_curriculum, per_step or training.local_batch_size)


def order_sampler_of(settings: RunSettings, dp_world_size: int = 1) -> OrderSampler:
    ao = settings.aogpt
    curriculum = curriculum_from_config(settings, dp_world_size)
    return OrderSampler(ao.order, settings.training.seq_len, ao.p_l2r, ao.order_seed, curriculum)


def ordered_windows(
    base, settings: RunSettings, dp_rank: int, infinite: bool = True, dp_world_size: int = 1
) -> OrderedTextDataset:
    """`base`'s windows in the orders of `[aogpt]`, shuffled through `shuffle_windows` when infinite.
    `settings`: the run's settings (sections.RunSettings)."""
    ao = settings.aogpt
    sampler = order_sampler_of(settings, dp_world_size)
    shuffle_windows = ao.shuffle_windows if infinite else 0
    return OrderedTextDataset(base, sampler, dp_rank, shuffle_windows, ao.order_seed, ao.loss_path == "fused")


def log_l2r_share(metrics_processor, settings: RunSettings) -> None:
    """Under a curriculum, every training metrics line (console aside: TensorBoard, W&B) also carries the share
    of left-to-right orders its step's batches were drawn with (`aogpt/l2r_share`): torchtitan's
    MetricsProcessor.log(step, loss, max_loss, grad_norm, extra_metrics=...) on both versions, wrapped."""
    ao = settings.aogpt
    if not ao.l2r_curriculum_steps:
        return
    curriculum = L2RCurriculum(ao.l2r_curriculum_steps, ao.l2r_curriculum)
    log = metrics_processor.log

    def log_with_share(step, *args, extra_metrics=None, **kwargs):
        extra = {**(extra_metrics or {}), L2R_SHARE: curriculum.share(step, ao.p_l2r)}
        return log(step, *args, extra_metrics=extra, **kwargs)

    metrics_processor.log = log_with_share
