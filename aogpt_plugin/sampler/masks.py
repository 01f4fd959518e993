"""The parallel-generation attention mask (paper Figure 10) over a preallocated cache, per sample.

A step of sample b feeds `width` query slots written to cache slots cache_len .. cache_len+width-1:
first its `pending` real slots (not yet encoded), then width - pending duplicates of the last one.

  query q < pending - 1      : causal -- the cache and the pending slots up to itself
  query q >= pending - 1     : the cache, the first pending - 1 slots, and itself only
                               (the last real slot and its duplicates never see each other)
  query q >= width (padding) : cache slot 0 only, so no row is empty (its output is discarded)

Everything at or past cache_len + width is stale (old duplicates) or unused, and is hidden.
`visible` is the single definition; the dense boolean mask (SDPA) and the FlexAttention mask_mod
both call it, and the BlockMask's block lists are derived from the same three numbers.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask

FLEX_BLOCK = 128  # FlexAttention's default sparse block size (q and kv)


def visible(
    q: torch.Tensor, kv: torch.Tensor, cache_len: torch.Tensor, pending: torch.Tensor, width: torch.Tensor
) -> torch.Tensor:
    """May query slot q (0-based within the step) attend to cache slot kv? All args broadcast."""
    shared = cache_len + torch.minimum(q, pending - 1)  # cache + pending slots visible to every later query
    return torch.where(q < width, (kv < shared) | (kv == cache_len + q), kv == 0)


def dense_mask(
    cache_len: torch.Tensor, pending: torch.Tensor, width: torch.Tensor, q_len: int, kv_len: int
) -> torch.Tensor:
    """(B, 1, q_len, kv_len) bool mask for SDPA; the per-sample tensors have shape (B,)."""
    device = cache_len.device
    q = torch.arange(q_len, device=device).view(1, 1, q_len, 1)
    kv = torch.arange(kv_len, device=device).view(1, 1, 1, kv_len)
    per_sample = [t.view(-1, 1, 1, 1) for t in (cache_len, pending, width)]
    return visible(q, kv, *per_sample)


class FlexStepMask:
    """BlockMasks for one generation: the mask_mod reads per-sample tensors that each step updates in
    place, and the block lists come from a few tensor ops instead of `create_block_mask`
    (~2.4 ms per call on CPU), so building a step's mask costs no mask_mod evaluation and no recompile.
    """

    def __init__(self, batch: int, device: torch.device | str, block_size: int = FLEX_BLOCK):
        self.block_size = block_size
        self.cache_len, self.pending, self.width = (torch.zeros(batch, dtype=torch.long, device=device) for _ in "cpw")
        cache_len, pending, width = self.cache_len, self.pending, self.width

        def mask_mod(b, h, q_idx, kv_idx):
            return visible(q_idx, kv_idx, cache_len[b], pending[b], width[b])

        self.mask_mod = mask_mod

    def __call__(
        self, cache_len: torch.Tensor, pending: torch.Tensor, width: torch.Tensor, q_len: int, kv_len: int
    ) -> BlockMask:
        self.cache_len.copy_(cache_len)
        self.pending.copy_(pending)
        self.width.copy_(width)
        return step_block_mask(self.cache_len, self.pending, self.width, q_len, kv_len, self.mask_mod, self.block_size)


def step_block_mask(
    cache_len: torch.Tensor,
    pending: torch.Tensor,
    width: torch.Tensor,
    q_len: int,
    kv_len: int,
    mask_mod,
    block_size: int = FLEX_BLOCK,
    full_blocks: bool = True,
) -> BlockMask:
    """The BlockMask of a step from the per-sample (B,) device tensors, by tensor ops alone (no host
    reads: the static step builds it inside a CUDA graph). Only the kv block lists are built: the
    forward never reads the q-block lists, whose transposes cost ~1 ms of CPU per step.

    `full_blocks=False` lists every touched block as partial (mask_mod evaluated on all of them): the
    same attention, and FlexDecoding then splits each row's touched blocks evenly over its SPLIT_KV
    programs instead of splitting the whole cache (scripts/bench_flex_decode.py measures both)."""
    bs, device = block_size, cache_len.device
    n_q, n_kv = -(-q_len // bs), -(-kv_len // bs)
    c, p, w = (t.view(-1, 1) for t in (cache_len, pending, width))
    q_lo = torch.arange(n_q, device=device).view(1, -1) * bs
    q_hi = torch.clamp(q_lo + bs, max=q_len) - 1
    any_valid = q_lo < w
    all_valid = q_hi < w
    # rows of a q block reach at most kv = cache_len + (last valid q); padding rows reach kv 0
    last_kv = torch.where(any_valid, c + torch.minimum(q_hi, w - 1), 0)
    touched = torch.clamp(last_kv // bs + 1, max=n_kv)
    blocks = torch.arange(n_kv, device=device, dtype=torch.int32)
    every = blocks.expand(*touched.shape, n_kv)  # each row's block list, from block 0
    if full_blocks:
        # a kv block is full when every row of the q block sees all of it through the shared part
        full = torch.minimum(torch.where(all_valid, (c + torch.minimum(q_lo, p - 1)) // bs, 0), touched)
        partial, partial_idx = touched - full, torch.clamp(full.unsqueeze(-1).int() + blocks, max=n_kv - 1)
        full_num, full_idx = full.int().unsqueeze(1), every.unsqueeze(1).contiguous()
    else:
        partial, partial_idx, full_num, full_idx = touched, every, None, None
    return BlockMask.from_kv_blocks(
        partial.int().unsqueeze(1),
        partial_idx.unsqueeze(1).contiguous(),
        full_num,
        full_idx,
        BLOCK_SIZE=bs,
        mask_mod=mask_mod,
        seq_lengths=(q_len, kv_len),
        compute_q_blocks=False,
    )
