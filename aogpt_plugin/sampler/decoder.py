"""AO-GPT's layers run on a few new slots against a static KV cache (one cached forward pass).

A slot is described exactly as in training: the token it reads and that token's position (or the
[None] start slot), plus the target position it is conditioned on. New keys/values are written
into the cache first, then the slots attend over the cache under the step's mask -- so nothing is
concatenated or reallocated per step. The layers are those of the model's decode view
(decode_view.py: adaLN as per-position tables, packed Linears on CPU).

The cache is preallocated gpt-fast style: one buffer per layer, written in place. Cache slot j holds
the keys/values of decoder slot j (slot 0 = [None], slot j = the j-th token in the sample's order).
n positions need at most n real slots; slot n is a scratch row that padded queries of a ragged batch
write into, so every write has a valid target and nothing real is hit.

Attention runs as SDPA with a dense boolean mask or as compiled FlexAttention with a BlockMask; both
compute the same masked softmax attention (tests check they agree). Which is faster depends on the
device: on CPU in torch 2.13, SDPA with a bool mask beats compiled flex at every decode shape, while
on CUDA flex skips the masked-out blocks of the static cache. `auto` picks per device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from ..errors import UserError
from ..model import AOGPT
from .decode_view import decode_model
from .masks import FlexStepMask, dense_mask

# ---- attention backends ---------------------------------------------------------------------
BACKENDS = ("auto", "sdpa", "flex")

_compiled_flex = None


def compiled_flex_attention():
    """The one compiled flex instance of the process (dynamic=True: ~3 graphs for all step shapes).

    Each new `torch.compile(flex_attention)` wrapper shares the code cache and eats into
    `recompile_limit`, so there must be only one (as torchtitan does).
    """
    global _compiled_flex
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=True)
    return _compiled_flex


# Compiled flex on CPU (torch 2.13) returns wrong attention for head_dim 8 and 16 whenever the key
# length is not a multiple of 128 (checked against SDPA; 24, 32, 48, 64, 128 are right).
CPU_FLEX_MIN_HEAD_DIM = 24


def resolve_backend(backend: str, device: torch.device | str, head_dim: int | None = None) -> str:
    if backend not in BACKENDS:
        raise UserError(f"backend={backend!r} is not supported; allowed: {', '.join(BACKENDS)}")
    on_cpu = torch.device(device).type == "cpu"
    if backend == "auto":
        return "sdpa" if on_cpu else "flex"
    if backend == "flex" and on_cpu and head_dim is not None and head_dim < CPU_FLEX_MIN_HEAD_DIM:
        raise UserError(
            f"backend='flex' on CPU gives wrong results for head_dim={head_dim} in this torch "
            f"(needs head_dim >= {CPU_FLEX_MIN_HEAD_DIM}); use backend 'sdpa' or 'auto'"
        )
    return backend


def sdpa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q (B, H, W, Dh) against k, v (B, H, S, Dh); mask (B or 1, 1, W, S) bool, True = attend."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: BlockMask) -> torch.Tensor:
    return compiled_flex_attention()(q, k, v, block_mask=block_mask)


# ---- the static cache -----------------------------------------------------------------------
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
        shape = (n_layers, batch, n_heads, slots, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.batch_index = torch.arange(batch, device=device).unsqueeze(1)

    @property
    def slots(self) -> int:
        return self.k.shape[3]

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
    def __init__(self, model: AOGPT, batch: int, slots: int, backend: str = "auto", linears: str = "auto"):
        args = model.model_args
        weight = model.tok_embeddings.weight
        self.view = decode_model(model, linears)
        self.model, self.batch = self.view.model, batch
        self.device = weight.device
        self.backend = resolve_backend(backend, self.device, args.head_dim)
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
        Flex always spans the whole static cache: its BlockMask skips the unused blocks.
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
        for i, layer in enumerate(self.model.layers.values()):

            def attend(q, k, v, i=i):
                if isinstance(slots, int):
                    cache.write_range(i, k, v, slots)
                else:
                    cache.write(i, k, v, slots)
                if flex:
                    return flex_attend(q, cache.k[i], cache.v[i], mask)
                return sdpa_attend(q, cache.k[i, :, :, :kv_len], cache.v[i, :, :, :kv_len], mask)

            h = layer(h, cond, attend=attend)
        return h

    def logits(self, h: torch.Tensor, cond: torch.Tensor | None, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Output logits of the slots `rows` (B, R) of h (all slots if None)."""
        if rows is not None:
            h = h.gather(1, rows.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
            if cond is not None:
                cond = cond.gather(1, rows.unsqueeze(-1).expand(-1, -1, cond.shape[-1]))
        return self.model.head(h, cond)
