"""torchtitan 0.2.2's text windows, kept under 0.3.

0.3's HuggingFaceTextDataset packs each document without its last token (so a document's EOS never
reaches the inputs) and cuts seq_len-token windows, which changes every batch (measured: the debug
recipe's losses differ from step 1). This is 0.2.2's packing (documents with BOS/EOS concatenated,
windows of seq_len + 1 tokens) with the same state keys, so the data position of a 0.2.2 checkpoint
carries over. Datasets are looked up in torchtitan's table, where datasets.py adds aogpt's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset


class PackedTextWindows(IterableDataset, Stateful):
    """torchtitan 0.2.2's HuggingFaceTextDataset packing: yields ({"input": x[:-1]}, x[1:]) from
    consecutive windows x of seq_len + 1 tokens; state {token_buffer, sample_idx | data}."""

    def __init__(self, dataset_name, dataset_path, tokenizer, seq_len, dp_rank=0, dp_world_size=1, infinite=False):
        from datasets.distributed import split_dataset_by_node
        from torchtitan.hf_datasets.text_datasets import _validate_dataset

        path, loader, self._text = _validate_dataset(dataset_name.lower(), dataset_path)
        self.dataset_name = dataset_name
        self._data = split_dataset_by_node(loader(path), dp_rank, dp_world_size)
        self._tokenizer, self.seq_len, self.infinite = tokenizer, seq_len, infinite
        self._sample_idx = 0
        self._token_buffer: list[int] = []

    def _map_style(self) -> bool:
        from datasets import Dataset

        return isinstance(self._data, Dataset)

    def _get_data_iter(self):
        if self._map_style():
            return iter([]) if self._sample_idx == len(self._data) else iter(self._data.skip(self._sample_idx))
        return iter(self._data)

    def __iter__(self):
        n = 1 + self.seq_len
        while True:
            for sample in self._get_data_iter():
                self._token_buffer.extend(self._tokenizer.encode(self._text(sample), add_bos=True, add_eos=True))
                self._sample_idx += 1
                while len(self._token_buffer) >= n:
                    x = torch.LongTensor(self._token_buffer[:n])
                    self._token_buffer = self._token_buffer[n:]
                    yield {"input": x[:-1]}, x[1:]
            if not self.infinite:
                break
            self._sample_idx = 0
            if not self._map_style() and hasattr(self._data, "set_epoch") and hasattr(self._data, "epoch"):
                self._data.set_epoch(self._data.epoch + 1)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"token_buffer": self._token_buffer}
        if self._map_style():
            state["sample_idx"] = self._sample_idx
        else:
            state["data"] = self._data.state_dict()
        return state

    def load_state_dict(self, state_dict) -> None:
        self._token_buffer = state_dict["token_buffer"]
        if self._map_style():
            self._sample_idx = state_dict["sample_idx"]
        else:
            self._data.load_state_dict(state_dict["data"])
