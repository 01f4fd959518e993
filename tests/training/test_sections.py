"""The [aogpt] / [ema] sections ask each rule's owner (model args, orders) instead of restating it."""

from __future__ import annotations

import pytest

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.orders import OrderSampler, canonical_order
from aogpt_plugin.training.sections import AOGPT


@pytest.mark.parametrize("p_l2r", [-0.1, 1.5])
def test_p_l2r_has_one_rule_for_the_section_and_the_order_sampler(p_l2r):
    message = f"aogpt.p_l2r={p_l2r} is outside the allowed range [0, 1]"
    for build in (lambda: AOGPT(p_l2r=p_l2r), lambda: OrderSampler("mixture", 8, p_l2r)):
        with pytest.raises(ConfigError) as info:
            build()
        assert str(info.value) == message


def test_conditioning_message_is_the_model_args_one():
    from aogpt_plugin.model import AOGPTModelArgs

    messages = []
    for build in (lambda: AOGPT(conditioning="film"), lambda: AOGPTModelArgs(conditioning="film")):
        with pytest.raises(ConfigError) as info:
            build()
        messages.append(str(info.value))
    assert messages[0] == messages[1] == "aogpt.conditioning='film' is not supported; allowed: adaln, concat, none"


def test_order_specs_are_stored_in_the_orders_spelling():
    assert canonical_order("blockwise:04") == AOGPT(order="blockwise:04").order == "blockwise:4"
    with pytest.warns(FutureWarning):
        assert AOGPT(order="uniform").order == "random"
