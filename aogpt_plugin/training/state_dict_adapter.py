"""torchtitan StateDictAdapter for AO-GPT: its "HF" side is the authors' checkpoint layout.

torchtitan uses the adapter for `checkpoint.last_save_in_hf` / `initial_load_in_hf`. AO-GPT has
no Hugging Face model class; the only external layout is the authors' nanoGPT-style one
(see model/authors_names.py), so that is what `to_hf` / `from_hf` speak.
"""

from __future__ import annotations

from typing import Any

from torchtitan.protocols.state_dict_adapter import BaseStateDictAdapter

from ..model.authors_names import from_authors_names, to_authors_names


class AOGPTStateDictAdapter(BaseStateDictAdapter):
    def __init__(self, model_args, hf_assets_path: str | None):
        self.model_args = model_args
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = None

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        return to_authors_names(state_dict)

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        return from_authors_names(hf_state_dict)

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False):
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        return HuggingFaceStorageReader(path)
