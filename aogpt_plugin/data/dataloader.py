"""Wraps torchtitan's packed text dataset so each window is read in an order sigma.

torchtitan yields ({"input": x[:-1]}, x[1:]) from windows of seq_len+1 tokens; AO training needs
the n tokens themselves, so the wrapper keeps `input` (n tokens) and replaces the shifted label
by x[sigma]. What reaches `model(input, order=order)` and the loss:

    ({"input": x, "order": sigma}, x[sigma])

The order stream index is part of the dataloader state, so a resumed run draws the same orders.
"""

from __future__ import annotations

from dataclasses import asdict

from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset

from .orders import OrderSampler


class OrderedTextDataset(IterableDataset, Stateful):
    def __init__(self, base, sampler: OrderSampler, stream: int):
        self.base, self.sampler, self.stream = base, sampler, stream
        self._index = 0  # sequences drawn so far on this stream

    def __iter__(self):
        for input_dict, _shifted in self.base:
            x = input_dict["input"]
            order = self.sampler.sample(self.stream, self._index)
            self._index += 1
            yield {"input": x, "order": order}, x[order]

    def state_dict(self):
        return {"base": self.base.state_dict(), "order_index": self._index}

    def load_state_dict(self, state_dict):
        self.base.load_state_dict(state_dict["base"])
        self._index = state_dict["order_index"]


def order_sampler_from_config(job_config) -> OrderSampler:
    ao = job_config.aogpt
    return OrderSampler(ao.order, job_config.training.seq_len, ao.p_l2r, ao.order_seed)


def build_ordered_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite: bool = True):
    """torchtitan `build_dataloader_fn`: the packed text stream of `[training]`, in sampled orders."""
    from torchtitan.components.dataloader import ParallelAwareDataloader
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

    training = job_config.training
    base = HuggingFaceTextDataset(
        dataset_name=training.dataset,
        dataset_path=training.dataset_path,
        tokenizer=tokenizer,
        seq_len=training.seq_len,
        dp_rank=dp_rank,
        dp_world_size=dp_world_size,
        infinite=infinite,
    )
    dataset = OrderedTextDataset(base, order_sampler_from_config(job_config), stream=dp_rank)
    kwargs = {**asdict(training.dataloader), "batch_size": training.local_batch_size}
    return ParallelAwareDataloader(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, **kwargs)
