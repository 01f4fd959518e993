"""The model as the sampler runs it: a view with adaLN tables and (on CPU) packed Linears.

`decode_model(model, linears)` returns a structural copy of `model` that shares its parameters and
buffers, with two inference-only changes, each exact up to float rounding:
  - adaLN as a per-target-position table: a slot's shift/scale/gate depend on nothing but its target
    position t, Linear(SiLU(E[t])), so they are computed once for every position (max_seq_len x 6d per
    block, 226 MB for the small model in float32) and each step gathers one row per slot instead of
    running 12 + 1 small Linears that each read their whole weight for a few rows; the decoder then
    passes target indices (B, W, 1) as the conditioning instead of SiLU(E[t]) vectors;
  - every remaining nn.Linear packed for oneDNN when that kernel is chosen. A decode step multiplies
    every weight by a handful of rows (1 per sample at T=n, 2b-1 when a step unmasks b tokens). On CPU
    in torch 2.13, aten's fp32 addmm picks a poor kernel for 2-16 rows, and oneDNN on a prepacked
    weight was faster at every row count measured (docs/benchmarks.md, `scripts/bench_linears.py`).
    Inductor's `freezing` uses the same two ops (`mkldnn._reorder_linear_weight`,
    `mkldnn._linear_pointwise`); here they run in eager mode, so nothing is compiled.
The view is built once per model and rebuilt whenever any parameter is written in place (tensor
version counters), so a model that keeps training never samples with stale weights. The caller's
model is never modified.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..devices import LINEAR_KERNELS
from ..errors import UserError

# ---- Linear kernels -------------------------------------------------------------------------
# LINEAR_KERNELS (the choices) live in devices.py with the other runtime flags

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


# ---- adaLN tables ---------------------------------------------------------------------------
class ModulationTable(nn.Module):
    """forward(targets) = adaln(SiLU(target_embeddings[targets])); targets (..., 1) long."""

    def __init__(self, adaln: nn.Linear, target_embeddings: nn.Embedding):
        super().__init__()
        with torch.no_grad():
            self.table = adaln(F.silu(target_embeddings.weight)).detach()

    def forward(self, targets: torch.Tensor) -> torch.Tensor:
        return F.embedding(targets[..., 0], self.table)


def tabulate_modulation(model: nn.Module) -> bool:
    """Replace every adaLN Linear of an AO-GPT (view) by its table; False if it has no adaLN."""
    if getattr(model, "final_adaln", None) is None:
        return False
    positions = model.target_embeddings
    for block in model.layers.values():
        block.adaln = ModulationTable(block.adaln, positions)
    model.final_adaln = ModulationTable(model.final_adaln, positions)
    return True


# ---- the view -------------------------------------------------------------------------------
@dataclass
class DecodeView:
    model: nn.Module
    tabled: bool  # adaLN conditioning is given as target indices (B, W, 1)
    linears: str  # the Linear kernel in use: aten | onednn


def build_view(model: nn.Module, linears: str) -> DecodeView:
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    view = copy.deepcopy(model, memo)
    tabled = tabulate_modulation(view)
    if linears == "onednn":
        for module in list(view.modules()):
            for name, child in module.named_children():
                if type(child) is nn.Linear:
                    setattr(module, name, PackedLinear(child))
    return DecodeView(view.eval(), tabled, linears)


_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_key(model: nn.Module) -> tuple | None:
    """Identity and version of every parameter; None if versions are not tracked (inference
    tensors), in which case nothing is cached."""
    try:
        return tuple((t.data_ptr(), t._version) for t in model.parameters())
    except RuntimeError:
        return None


def decode_model(model: nn.Module, linears: str = "auto") -> DecodeView:
    weight = next(model.parameters())
    kernel = resolve_linear_kernel(linears, weight.device, weight.dtype)
    key = (kernel, _weights_key(model))
    cached = _views.get(model)
    if key[1] is not None and cached is not None and cached[0] == key:
        return cached[1]
    view = build_view(model, kernel)
    if key[1] is not None:
        _views[model] = (key, view)
    return view
