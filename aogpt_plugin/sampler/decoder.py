"""AO-GPT's layers run on a few new slots against a preallocated KV cache (one cached forward pass).

A slot is described exactly as in training: the token it reads and that token's position (or the
[None] start slot), plus the target position it is conditioned on. New keys/values are written
into the cache first, then the slots attend over the cache under the step's mask -- so nothing is
concatenated or reallocated per step. The layers are those of the model's decode view (below:
adaLN as per-position tables, packed Linears on CPU).

The cache is preallocated gpt-fast style: one buffer per layer, written in place. Cache slot j holds
the keys/values of decoder slot j (slot 0 = [None], slot j = the j-th token in the sample's order).
n positions need at most n real slots; slot n is a scratch row that padded queries of a ragged batch
write into, so every write has a valid target and nothing real is hit.

Attention runs as SDPA with a dense boolean mask or as compiled FlexAttention with a BlockMask; both
compute the same masked softmax attention (tests check they agree). Which is faster depends on the
device: on CPU in torch 2.13, SDPA with a bool mask beats compiled flex at every decode shape, while
on CUDA flex skips the masked-out blocks of the cache. `auto` picks per device (choices.py).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from ..model import AOGPT, TransformerBlock, position_features
from .graphs import raise_compile_limits
from .masks import FlexStepMask, dense_mask
from .options import DecodeAttention

# ---- attention backends ---------------------------------------------------------------------

_compiled_flex: dict[bool, object] = {}


def compiled_flex_attention(per_shape: bool = False):
    """The compiled flex instances of the process, one per kind. Not per shape (the dynamic sampler,
    dynamic=True): ~3 graphs for all step shapes. `per_shape` (the static step): a graph per shape, with
    the batch known, which is what lets inductor pick the FlexDecoding kernel for short queries (the
    static step has few shapes).

    Every `torch.compile(flex_attention)` wrapper shares the code cache and eats into
    `recompile_limit`, so there is one of each (as torchtitan does), under raised limits (graphs.py).
    """
    if per_shape not in _compiled_flex:
        raise_compile_limits()
        _compiled_flex[per_shape] = torch.compile(flex_attention, dynamic=not per_shape)
    return _compiled_flex[per_shape]


def sdpa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q (B, H, W, Dh) against k, v (B, H, S, Dh); mask (B or 1, 1, W, S) bool, True = attend."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def flex_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_mask: BlockMask,
    per_shape: bool = False,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    return compiled_flex_attention(per_shape)(q, k, v, block_mask=block_mask, kernel_options=kernel_options)


# inductor lowers FlexAttention of fewer query rows than this to FlexDecoding (flex_decoding._use_flex_decoding),
# the kernel a DecodeAttention's options are for; a wider step (a prompt's prefill) keeps torch's options
FLEX_DECODING_QUERIES = 128


# ---- the decode view: adaLN tables and packed Linears ---------------------------------------
# The model as the sampler runs it: a view with adaLN tables and (on CPU) packed Linears.
#
# `decode_model(model, linears)` returns a structural copy of `model` that shares its parameters and
# buffers, with two inference-only changes, each exact up to float rounding:
#   - adaLN as a per-target-position table: a slot's shift/scale/gate depend on nothing but its target
#     position t, Linear(SiLU(E[t])), so they are computed once for every position (max_seq_len x 6d per
#     block, 226 MB for the small model in float32) and each step gathers its slots' rows of every block's
#     table at once (one kernel) instead of running 12 + 1 small Linears that each read their whole
#     weight for a few rows; the decoder then passes target indices (B, W, 1) as the conditioning
#     instead of SiLU(E[t]) vectors, and the blocks and head apply them as fused formulas (TabledAOGPT);
#   - every remaining nn.Linear packed for oneDNN when that kernel is chosen. A decode step multiplies
#     every weight by a handful of rows (1 per sample at T=n, 2b-1 when a step unmasks b tokens). On CPU
#     in torch 2.13, aten's fp32 addmm picks a poor kernel for 2-16 rows, and oneDNN on a prepacked
#     weight was faster at every row count measured (docs/benchmarks.md, `scripts/bench_linears.py`).
#     Inductor's `freezing` uses the same two ops (`mkldnn._reorder_linear_weight`,
#     `mkldnn._linear_pointwise`); here they run in eager mode, so nothing is compiled.
# The view is built once per model and rebuilt whenever any parameter is written in place (tensor
# version counters), so a model that keeps training never samples with stale weights. The caller's
# model is never modified.
# Which kernel runs is decided once per run (choices.py: `resolve_linear_kernel`); the view takes it resolved.

# Row count oneDNN lays the packed weight out for; 4 was best or within noise of best for 1-256 rows.
PACK_ROWS_HINT = 4


class PackedLinear(nn.Module):
    """y = x W^T + b with W reordered once into oneDNN's blocked layout (an nn.Linear's weight and bias,
    or a tied head's: the token embedding, no bias)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
        self.bias = None if bias is None else bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")


# ---- adaLN tables ---------------------------------------------------------------------------
def modulation_table(adaln: nn.Linear, target_embeddings: nn.Embedding, chunks: int = 1, plus_one: tuple = ()):
    """adaln(SiLU(target_embeddings)) for every target position, (positions, width): the table training's
    `modulation_rows` computes each forward, here once per weights. The chunks numbered in `plus_one` (of
    `chunks` equal ones) hold 1 + their value: scales, as the fused formulas read them (rounded as the
    model's `1 + scale` rounds them, in the table's dtype)."""
    with torch.no_grad():
        table = adaln(position_features(target_embeddings)).detach()
        for c in plus_one:
            table.narrow(-1, c * table.shape[-1] // chunks, table.shape[-1] // chunks).add_(1)
    return table


class ModulationTable(nn.Module):
    """forward(targets) = adaln(SiLU(target_embeddings[targets])); targets (..., 1) long (`modulation_table`)."""

    def __init__(self, adaln: nn.Linear, target_embeddings: nn.Embedding, chunks: int = 1, plus_one: tuple = ()):
        super().__init__()
        self.table = modulation_table(adaln, target_embeddings, chunks, plus_one)

    def forward(self, targets: torch.Tensor) -> torch.Tensor:
        return F.embedding(targets[..., 0], self.table)


class BlockModulation(nn.Module):
    """Every block's adaLN table in one tensor (layers, positions, 6 dim), each holding shift, 1 + scale and
    gate per branch (FusedBlock's order): a step gathers its slots' rows for every layer in one kernel, not
    one per layer. forward(targets (..., 1)) gives each layer's rows (..., 6 dim)."""

    def __init__(self, blocks: list[nn.Module], target_embeddings: nn.Embedding):
        super().__init__()
        first = blocks[0].adaln
        self.table = torch.empty(
            len(blocks),
            target_embeddings.num_embeddings,
            first.out_features,
            dtype=first.weight.dtype,
            device=first.weight.device,
        )
        for i, block in enumerate(blocks):  # one block's table at a time beside the whole
            self.table[i] = modulation_table(block.adaln, target_embeddings, chunks=6, plus_one=(1, 4))

    def forward(self, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = self.table.index_select(1, targets.reshape(-1))
        return rows.view(self.table.shape[0], *targets.shape[:-1], self.table.shape[-1]).unbind(0)


class FusedBlock(TransformerBlock):
    """A decode view's adaLN block, given its modulation rows (`BlockModulation`: shift, 1 + scale, gate per
    branch): each modulation and each gated residual is one addcmul, 6 kernels fewer per block than
    TransformerBlock's formulas. A decode step on a GPU is launch-bound (a few microseconds a kernel,
    docs/benchmarks.md); the values agree up to rounding."""

    def forward(self, x: torch.Tensor, modulation: torch.Tensor, attend=None) -> torch.Tensor:
        shift_a, scale1_a, gate_a, shift_f, scale1_f, gate_f = modulation.chunk(6, dim=-1)
        x = torch.addcmul(x, gate_a, self.attention(torch.addcmul(shift_a, self.attention_norm(x), scale1_a), attend))
        return torch.addcmul(x, gate_f, self.feed_forward(torch.addcmul(shift_f, self.ffn_norm(x), scale1_f)))


class TabledAOGPT(AOGPT):
    """A decode view of an adaLN AO-GPT: its conditioning is target indices (..., 1), its blocks FusedBlocks
    fed by one `block_modulation` gather per step, its final table holds 1 + scale (one addcmul)."""

    def head(self, h: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
        shift, scale1 = self.final_adaln(cond).chunk(2, dim=-1)
        return self.project(torch.addcmul(shift, self.norm(h), scale1))


def tabulate_modulation(model: nn.Module) -> bool:
    """Make an AO-GPT (view) a TabledAOGPT: its adaLN Linears replaced by tables, its blocks by FusedBlocks;
    False if it has no adaLN."""
    if getattr(model, "final_adaln", None) is None:
        return False
    positions, blocks = model.target_embeddings, list(model.layers.values())
    model.block_modulation = BlockModulation(blocks, positions)
    for block in blocks:
        block.adaln = None  # in block_modulation
        block.__class__ = FusedBlock  # the view's copy only; the same parameters
    model.final_adaln = ModulationTable(model.final_adaln, positions, chunks=2, plus_one=(1,))
    model.__class__ = TabledAOGPT
    return True


# ---- the view -------------------------------------------------------------------------------
@dataclass
class DecodeView:
    model: nn.Module
    tabled: bool  # adaLN conditioning is given as target indices (B, W, 1)
    linears: str  # the Linear kernel in use: aten | onednn
    step_buffers: dict = field(default_factory=dict)  # the static step's buffers for these weights (static.py)


def build_view(model: nn.Module, linears: str) -> DecodeView:
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    view = copy.deepcopy(model, memo)
    tabled = tabulate_modulation(view)
    if linears == "onednn":
        for module in list(view.modules()):
            for name, child in module.named_children():
                if type(child) is nn.Linear:
                    setattr(module, name, PackedLinear(child.weight, child.bias))
        if view.output is None:  # a tied head multiplies by the token embedding: packed as the head
            view.output = PackedLinear(view.tok_embeddings.weight)
    return DecodeView(view.eval(), tabled, linears)


_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_key(model: nn.Module) -> tuple | None:
    """Identity and version of every parameter; None if versions are not tracked (inference
    tensors), in which case nothing is cached."""
    try:
        return tuple((t.data_ptr(), t._version) for t in model.parameters())
    except RuntimeError:
        return None


def decode_model(model: nn.Module, linears: str) -> DecodeView:
    """The model's decode view with the resolved Linear kernel `linears` (aten | onednn): built once
    per (kernel, weights) and reused."""
    key = (linears, _weights_key(model))
    cached = _views.get(model)
    if key[1] is not None and cached is not None and cached[0] == key:
        return cached[1]
    view = build_view(model, linears)
    if key[1] is not None:
        _views[model] = (key, view)
    return view


def release_decode_state(model: nn.Module) -> bool:
    """Drop what sampling built for `model` and keeps for the next run: its decode view (the Linear kernels
    packed for it) and the view's static step (a KV cache over every position, its compiled code and CUDA
    graphs). The next run builds them again. True if there was something to drop."""
    return _views.pop(model, None) is not None


# ---- the preallocated cache -----------------------------------------------------------------
class KVCache:
    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_heads: int,
        slots: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        # one buffer per layer (gpt-fast's layout), not one (layers, ...) tensor: a compiled step writes each
        # layer's buffer in place, where a write into a view of one shared buffer may be functionalised into
        # a copy of every layer's cache, per layer
        shape = (batch, n_heads, slots, head_dim)
        self.k = tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers))
        self.v = tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers))
        self.batch_index = torch.arange(batch, device=device).unsqueeze(1)

    @property
    def slots(self) -> int:
        return self.k[0].shape[2]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """k, v: (B, H, W, Dh) go to cache slots `slots` (B, W), per sample."""
        self.k[layer][self.batch_index, :, slots] = k.transpose(1, 2)
        self.v[layer][self.batch_index, :, slots] = v.transpose(1, 2)

    def write_range(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int) -> None:
        """Same slots start..start+W-1 for every sample (lock-step batches, AR decoding)."""
        width = k.shape[2]
        self.k[layer][:, :, start : start + width] = k
        self.v[layer][:, :, start : start + width] = v


# ---- the cached forward pass ----------------------------------------------------------------
class CachedDecoder:
    def __init__(
        self,
        model: AOGPT,
        batch: int,
        slots: int,
        backend: str,
        linears: str,
        flex_per_shape: bool = False,
        decode_attention: DecodeAttention | None = None,
    ):
        """`backend` (sdpa | flex) and `linears` (aten | onednn) as resolved (choices.py).
        `flex_per_shape`: compile flex per step shape, for the static step (static.py) on CUDA.
        `decode_attention`: the static step's FlexAttention setting (its kernel options are passed here;
        its mask layout is the step's), resolved; None: torch's options."""
        args = model.model_args
        weight = model.tok_embeddings.weight
        self.view = decode_model(model, linears)
        self.model, self.batch = self.view.model, batch
        self.device = weight.device
        self.flex_per_shape = flex_per_shape and self.device.type == "cuda"  # on a CPU it only costs compile time
        self.backend = backend
        self.decode_attention = decode_attention
        self.cache = KVCache(args.n_layers, batch, args.n_heads, slots, args.head_dim, weight.dtype, self.device)
        self.flex_mask = FlexStepMask(batch, self.device) if self.backend == "flex" else None

    # ---- inputs ---------------------------------------------------------------------------
    def embed(
        self, tokens: torch.Tensor, positions: torch.Tensor, is_start: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Slot inputs and conditioning, all (B, W): the token read at `positions` (or [None] where
        `is_start`), conditioned on target position `targets` (as the indices (B, W, 1) that the
        view's adaLN tables look up, or the model's own conditioning vectors)."""
        model = self.model
        h = model.embed_tokens(tokens, positions.clamp(min=0))
        h = torch.where(is_start.unsqueeze(-1), model.start_embedding(), h)
        cond = targets.unsqueeze(-1) if self.view.tabled else model.condition(targets)
        return h + model.input_shift(targets), cond

    # ---- masks ----------------------------------------------------------------------------
    def step_mask(self, cache_len: torch.Tensor, pending: torch.Tensor, width: torch.Tensor, q_len: int):
        """(mask, kv_len) of a step from per-sample (B,) host tensors (see masks.py).

        SDPA attends only over the first kv_len cache slots (the most any sample can see); a
        lock-step batch shares one mask, and a lock-step one-slot step (AR-like) needs none.
        Flex always spans the whole cache: its BlockMask skips the unused blocks.
        """
        if self.backend == "flex":
            dev = [t.to(self.device, non_blocking=True) for t in (cache_len, pending, width)]
            return self.flex_mask(*dev, q_len, self.cache.slots), self.cache.slots
        kv_len = int((cache_len + width).max())
        lockstep = all(bool((t == t[0]).all()) for t in (cache_len, pending, width))
        if lockstep and q_len == 1 and int(width[0]) == 1:
            return None, kv_len
        if lockstep:
            cache_len, pending, width = cache_len[:1], pending[:1], width[:1]
        dev = [t.to(self.device, non_blocking=True) for t in (cache_len, pending, width)]
        return dense_mask(*dev, q_len, kv_len), kv_len

    # ---- the forward pass -----------------------------------------------------------------
    def forward(
        self, h: torch.Tensor, cond: torch.Tensor | None, slots: torch.Tensor | int, mask, kv_len: int
    ) -> torch.Tensor:
        """Run every layer on slot inputs h (B, W, D); their K/V go to cache `slots` ((B, W) tensor, or
        an int first slot shared by all samples), then the queries attend over the first kv_len cache
        slots under `mask` (a bool tensor, a BlockMask, or None = all of them)."""
        cache, flex = self.cache, self.backend == "flex"
        options = self.flex_kernel_options(h.shape[1]) if flex else None
        layers = self.model.layers.values()
        conditioning = self.model.block_modulation(cond) if self.view.tabled else (cond,) * len(layers)
        for i, layer in enumerate(layers):

            def attend(q, k, v, i=i):
                if isinstance(slots, int):
                    cache.write_range(i, k, v, slots)
                else:
                    cache.write(i, k, v, slots)
                if flex:
                    return flex_attend(q, cache.k[i], cache.v[i], mask, self.flex_per_shape, options)
                return sdpa_attend(q, cache.k[i][:, :, :kv_len], cache.v[i][:, :, :kv_len], mask)

            h = layer(h, conditioning[i], attend=attend)
        return h

    def flex_kernel_options(self, width: int) -> dict | None:
        """FlexAttention's kernel options for a step of `width` query slots: the decode setting's, for the
        FlexDecoding kernel they tune; torch's for a wider step (FLEX_DECODING_QUERIES)."""
        setting = self.decode_attention
        return setting.kernel_options() if setting is not None and width < FLEX_DECODING_QUERIES else None

    def logits(self, h: torch.Tensor, cond: torch.Tensor | None, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Output logits of the slots `rows` (B, R) of h (all slots if None)."""
        if rows is not None:
            h = h.gather(1, rows.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
            if cond is not None:
                cond = cond.gather(1, rows.unsqueeze(-1).expand(-1, -1, cond.shape[-1]))
        return self.model.head(h, cond)
