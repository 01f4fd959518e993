"""AO-GPT's layers run on a few new slots against the static KV cache (one cached forward pass).

A slot is described exactly as in training: the token it reads and that token's position (or the
[None] start slot), plus the target position it is conditioned on. New keys/values are written
into the cache first, then the slots attend over the cache under the step's mask -- so nothing is
concatenated or reallocated per step. The layers are those of the model's decode view
(decode_view.py: adaLN as per-position tables, packed Linears on CPU).
"""

from __future__ import annotations

import torch

from ..model import AOGPT
from .attention import flex_attend, resolve_backend, sdpa_attend
from .decode_view import decode_model
from .kv_cache import KVCache
from .masks import FlexStepMask, dense_mask


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
