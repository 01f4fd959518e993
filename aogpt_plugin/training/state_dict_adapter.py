"""torchtitan StateDictAdapter for AO-GPT: its "HF" side is the authors' checkpoint layout, or, for GPT-2's
backbone, a Hugging Face GPT2LMHeadModel folder (loaded only).

torchtitan uses the adapter for `checkpoint.last_save_in_hf` / `initial_load_in_hf`. The layout
follows the model args' backbone: the paper's speaks the authors' nanoGPT-style layout (see
model/authors_names.py), both ways; GPT-2's reads a GPT-2 folder (`--checkpoint.initial_load_path
HF_DIR --checkpoint.initial_load_in_hf`: model/gpt2.py's mapping), and is never written (preflight
refuses `last_save_in_hf` for it: GPT-2's layout has no place for the target-position conditioning).

torchtitan's load calls `to_hf(model state)` (the tensors to read), `get_hf_storage_reader(path)`,
`dcp.load`, then `from_hf` (checkpoint.py `dcp_load`, 0.2.2 and 0.3 alike). For GPT-2, `to_hf` asks
for GPT-2's tensors at full size on every rank, the reader serves them from the folder (safetensors,
sharded or pytorch_model.bin; `GPT2FolderReader`), and `from_hf` maps them (model/gpt2.py), starts
the EMA shadows at them too, and lays each tensor out as the live one (a DTensor shard under FSDP).
adaLN's target table is not GPT-2's and keeps the model's own init.

The head is padded past the tokenizer's vocabulary (`vocab_multiple`). aogpt's training, sampler
and evaluation use only the real rows, so the padded rows keep their initial weights; the authors'
code samples over all of them, and would draw a padded id in most long samples. Written in their
layout, the padded rows of `lm_head.bias` are therefore MASKED_BIAS: the authors' softmax gives
them no probability (exp(-1e4) underflows to 0 in every float type, float16 included), and the
weights stay finite.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint import StorageReader
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.futures import Future
from torchtitan.protocols.state_dict_adapter import BaseStateDictAdapter

from ..model.args import AOGPTModelArgs
from ..model.authors_names import from_authors_names, to_authors_names
from ..model.gpt2 import GPT2Folder, GPT2Weights, check_gpt2_matches, from_gpt2, gpt2_shapes, read_gpt2_folder

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


class GPT2FolderReader(StorageReader):
    """A DCP StorageReader of a Hugging Face GPT-2 folder: GPT2LMHeadModel's tensors, whole (one chunk each),
    under its names, whatever file format or name prefix the folder uses (model/gpt2.py reads them)."""

    def __init__(self, folder: GPT2Folder, args: AOGPTModelArgs):
        super().__init__()
        self.folder, self.args = folder, args
        self.weights: GPT2Weights | None = None

    def reset(self, checkpoint_id=None) -> None:
        pass

    def read_metadata(self, *args, **kwargs) -> Metadata:
        self.weights = GPT2Weights(self.folder, self.args)  # names and shapes checked against the args
        # the properties' dtype is what the planner allocates in; each tensor is copied into its target's dtype
        entries = {
            name: TensorStorageMetadata(
                properties=TensorProperties(dtype=torch.float32),
                size=torch.Size(shape),
                chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=torch.Size(shape))],
            )
            for name, shape in gpt2_shapes(self.args).items()
        }
        return Metadata(state_dict_metadata=entries)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args, **kwargs) -> None:
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner) -> Future:
        if self.weights is None:
            self.weights = GPT2Weights(self.folder, self.args)
        for req in plan.items:
            tensor = self.weights[req.storage_index.fqn]
            for dim, (offset, length) in enumerate(zip(req.storage_offsets, req.lengths, strict=True)):
                tensor = tensor.narrow(dim, offset, length)
            target = planner.resolve_tensor(req).detach()
            target.copy_(tensor)
            planner.commit_tensor(req, target)
        done: Future = Future()
        done.set_result(None)
        return done

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return True


class AOGPTStateDictAdapter(BaseStateDictAdapter):
    def __init__(self, model_args, hf_assets_path: str | None):
        # 0.2.2 hands over the model args; 0.3 the model Config, which holds them (titan03/model.py)
        self.model_args: AOGPTModelArgs = getattr(model_args, "args", model_args)
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = None
        self._live: dict[str, Any] = {}  # GPT-2: the model state to_hf was given (from_hf lays tensors out as it)
        self._folder: GPT2Folder | None = None  # GPT-2: the folder get_hf_storage_reader opened

    @property
    def reads_gpt2(self) -> bool:
        return self.model_args.gpt2_backbone

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        if self.reads_gpt2:
            self._live = state_dict
            return {name: torch.empty(shape) for name, shape in gpt2_shapes(self.model_args).items()}
        return mask_padded_head(to_authors_names(state_dict), self.model_args.vocab_size)

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        if not self.reads_gpt2:
            return from_authors_names(hf_state_dict)
        full = from_gpt2(hf_state_dict, self.model_args, self._folder.start_token_id)
        full |= {f"ema.{k}": v for k, v in full.items() if f"ema.{k}" in self._live}  # the EMA starts here too
        return {k: _laid_out_as(v, self._live[k]) for k, v in full.items()}

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False):
        if self.reads_gpt2:
            self._folder = read_gpt2_folder(path, "checkpoint.initial_load_path")
            check_gpt2_matches(self._folder, self.model_args, "the run's model args")
            return GPT2FolderReader(self._folder, self.model_args)
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        return HuggingFaceStorageReader(path)


def _laid_out_as(full: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """`full` (a whole tensor, the same on every rank) in the dtype and layout of `live`: a DTensor's shard
    is cut locally (no communication), a plain tensor is copied."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(live, DTensor):
        return distribute_tensor(
            full.to(device=live.device, dtype=live.dtype), live.device_mesh, live.placements, src_data_rank=None
        )
    return full.to(device=live.device, dtype=live.dtype)
