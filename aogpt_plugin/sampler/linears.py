"""Which kernel runs the sampler's Linears: aten's addmm, or oneDNN with weights packed once (CPU).

A decode step multiplies every weight by a handful of rows (1 per sample at T=n, 2b-1 when a step
unmasks b tokens). On CPU in torch 2.13, aten's fp32 addmm picks a poor kernel for 2-16 rows, and
oneDNN on a prepacked weight was faster at every row count measured (docs/benchmarks.md, from
`scripts/bench_linears.py`). Inductor's `freezing` uses the same two ops
(`mkldnn._reorder_linear_weight`, `mkldnn._linear_pointwise`); here they run in eager mode, so
nothing is compiled. decode_view.py swaps them in.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import UserError

LINEAR_KERNELS = ("auto", "aten", "onednn")

# Row count oneDNN lays the packed weight out for; 4 was best or within noise of best for 1-256 rows.
PACK_ROWS_HINT = 4


def onednn_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def resolve_linear_kernel(kernel: str, device: torch.device | str, dtype: torch.dtype) -> str:
    """'auto' -> onednn for float32 on CPU (when torch has oneDNN), else aten."""
    if kernel not in LINEAR_KERNELS:
        raise UserError(f"linears={kernel!r} is not supported; allowed: {', '.join(LINEAR_KERNELS)}")
    if kernel == "auto":
        return "onednn" if onednn_available(device, dtype) else "aten"
    if kernel == "onednn" and not onednn_available(device, dtype):
        raise UserError(
            f"linears='onednn' needs float32 on a CPU with oneDNN (got {dtype} on {torch.device(device)}); "
            "allowed here: auto, aten"
        )
    return kernel


class PackedLinear(nn.Module):
    """y = x W^T + b with W reordered once into oneDNN's blocked layout."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACK_ROWS_HINT)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")
