"""The model as the sampler runs it: a view with adaLN tables and (on CPU) packed Linears.

`decode_model(model, linears)` returns a structural copy of `model` that shares its parameters and
buffers, with two inference-only changes, each exact up to float rounding:
  - adaLN as a per-target-position table (modulation.py); the decoder then passes target indices
    (B, W, 1) as the conditioning instead of SiLU(E[t]) vectors;
  - every remaining nn.Linear packed for oneDNN when that kernel is chosen (linears.py).
The view is built once per model and rebuilt whenever any parameter is written in place (tensor
version counters), so a model that keeps training never samples with stale weights. The caller's
model is never modified.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass

import torch.nn as nn

from .linears import PackedLinear, resolve_linear_kernel
from .modulation import tabulate_modulation


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
