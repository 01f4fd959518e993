"""A preallocated (static) KV cache, gpt-fast style: one buffer per layer, written in place.

Cache slot j holds the keys/values of decoder slot j (slot 0 = [None], slot j = the j-th token in
the sample's order). n positions need at most n real slots; slot n is a scratch row that padded
queries of a ragged batch write into, so every write has a valid target and nothing real is hit.
"""

from __future__ import annotations

import torch


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
