"""Renaming to and from the authors' checkpoint layout is a bijection over every parameter."""

from __future__ import annotations

import pytest
from conftest import tiny_model

from aogpt_plugin.model.authors_names import from_authors_names, to_authors_names


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_round_trip_over_all_parameters(conditioning):
    sd = tiny_model(conditioning).state_dict()
    theirs = to_authors_names(sd)
    assert len(theirs) == len(sd)
    assert from_authors_names(theirs).keys() == sd.keys()


def test_known_names():
    theirs = to_authors_names(tiny_model().state_dict())
    for name in [
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.wtpe.weight",
        "transformer.wnonee.weight",
        "transformer.h.1.attn.c_attn.weight",
        "transformer.h.0.mlp.c_proj.bias",
        "transformer.h.0.adaLN.1.weight",
        "transformer.final_layer.adaLN_final.1.bias",
        "lm_head.weight",
    ]:
        assert name in theirs


def test_unknown_key_is_named():
    with pytest.raises(KeyError, match="transformer.h.0.attn.rotary"):
        from_authors_names({"transformer.h.0.attn.rotary": None})
