"""torchtitan StateDictAdapter for AO-GPT: its "HF" side is the authors' checkpoint layout.

torchtitan uses the adapter for `checkpoint.last_save_in_hf` / `initial_load_in_hf`. AO-GPT has
no Hugging Face model class; the only external layout is the authors' nanoGPT-style one
(see model/authors_names.py), so that is what `to_hf` / `from_hf` speak.

The head is padded past the tokenizer's vocabulary (`vocab_multiple`). aogpt's training, sampler
and evaluation use only the real rows, so the padded rows keep their initial weights; the authors'
code samples over all of them, and would draw a padded id in most long samples. Written in their
layout, the padded rows of `lm_head.bias` are therefore MASKED_BIAS: the authors' softmax gives
them no probability (exp(-1e4) underflows to 0 in every float type, float16 included), and the
weights stay finite.
"""

from __future__ import annotations

from typing import Any

from torchtitan.protocols.state_dict_adapter import BaseStateDictAdapter

from ..model.authors_names import from_authors_names, to_authors_names

MASKED_BIAS = -1e4
HEAD_BIAS = "lm_head.bias"  # the authors' name of our `output.bias`


def mask_padded_head(authors_state: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """`authors_state` with the head bias rows >= `vocab_size` set to MASKED_BIAS (a new tensor: the
    live model's bias is not touched; a sharded DTensor stays sharded the same way)."""
    bias = authors_state.get(HEAD_BIAS)
    if bias is None or bias.shape[0] <= vocab_size:
        return authors_state
    from torch.distributed.tensor import DTensor, distribute_tensor

    sharded = isinstance(bias, DTensor)
    full = (bias.full_tensor() if sharded else bias).detach().clone()
    full[vocab_size:] = MASKED_BIAS
    masked = distribute_tensor(full, bias.device_mesh, bias.placements) if sharded else full
    return {**authors_state, HEAD_BIAS: masked}


class AOGPTStateDictAdapter(BaseStateDictAdapter):
    def __init__(self, model_args, hf_assets_path: str | None):
        self.model_args = model_args
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = None

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        return mask_padded_head(to_authors_names(state_dict), self.model_args.vocab_size)

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        return from_authors_names(hf_state_dict)

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False):
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        return HuggingFaceStorageReader(path)
