"""Attention backends for cached steps: SDPA with a dense boolean mask, or compiled FlexAttention.

Both compute the same masked softmax attention (tests check they agree). Which is faster depends
on the device: on CPU in torch 2.13, SDPA with a bool mask beats compiled flex at every decode
shape, while on CUDA flex skips the masked-out blocks of the static cache. `auto` picks per device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from ..errors import UserError

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
