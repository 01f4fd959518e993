"""Names of AO-GPT weights in the authors' nanoGPT-style checkpoints (scxue/AO-GPT-MDM) <-> ours.

Tensors need no reshaping: the authors' fused `c_attn` is laid out [q | k | v] exactly as our
`wqkv`, and their `wnonee` is our 1-row `none_embedding`. EMA buffers (`ema.*`) are not part of
the authors' model layout and are dropped when renaming to it.
"""

from __future__ import annotations

import re
from typing import Any

# (our name, authors' name); {i} is the block index
_NAME_PAIRS = [
    ("tok_embeddings.weight", "transformer.wte.weight"),
    ("pos_embeddings.weight", "transformer.wpe.weight"),
    ("target_embeddings.weight", "transformer.wtpe.weight"),
    ("none_embedding", "transformer.wnonee.weight"),
    ("layers.{i}.attention_norm.weight", "transformer.h.{i}.ln_1.weight"),
    ("layers.{i}.attention.wqkv.{p}", "transformer.h.{i}.attn.c_attn.{p}"),
    ("layers.{i}.attention.wo.{p}", "transformer.h.{i}.attn.c_proj.{p}"),
    ("layers.{i}.attention.q_norm.weight", "transformer.h.{i}.attn.q_norm.weight"),
    ("layers.{i}.attention.k_norm.weight", "transformer.h.{i}.attn.k_norm.weight"),
    ("layers.{i}.ffn_norm.weight", "transformer.h.{i}.ln_2.weight"),
    ("layers.{i}.feed_forward.w1.{p}", "transformer.h.{i}.mlp.c_fc.{p}"),
    ("layers.{i}.feed_forward.w2.{p}", "transformer.h.{i}.mlp.c_proj.{p}"),
    ("layers.{i}.adaln.{p}", "transformer.h.{i}.adaLN.1.{p}"),
    ("norm.weight", "transformer.final_layer.ln_f.weight"),
    ("final_adaln.{p}", "transformer.final_layer.adaLN_final.1.{p}"),
    ("output.{p}", "lm_head.{p}"),
]


def _compile(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)")
    return re.compile(f"^{pattern}$")


_OURS_TO_THEIRS = [(_compile(a), b) for a, b in _NAME_PAIRS]
_THEIRS_TO_OURS = [(_compile(b), a) for a, b in _NAME_PAIRS]


def _rename(name: str, table) -> str | None:
    for pattern, target in table:
        m = pattern.match(name)
        if m:
            return target.format(**m.groupdict())
    return None


def to_authors_names(state_dict: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in state_dict.items():
        if k.startswith("ema."):
            continue
        new = _rename(k, _OURS_TO_THEIRS)
        if new is None:
            raise KeyError(f"no authors' name for parameter {k!r}")
        out[new] = v
    return out


def from_authors_names(state_dict: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in state_dict.items():
        new = _rename(k.removeprefix("_orig_mod."), _THEIRS_TO_OURS)
        if new is None:
            raise KeyError(f"unknown AO-GPT checkpoint key {k!r}")
        out[new] = v
    return out
