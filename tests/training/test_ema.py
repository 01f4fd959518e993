"""EMA: warm-up schedule, update math, names in the state dict, swap and restore."""

from __future__ import annotations

import torch
from conftest import tiny_model

from aogpt_plugin.training.ema import EMA, attach_ema, clean_fqn


def test_update_follows_torch_ema_with_warmup():
    model = tiny_model()
    ema = attach_ema(model, decay=0.9, warmup=True)
    p = model.layers["0"].attention.wqkv.weight
    shadow = model.ema.layers.get_submodule("0.attention.wqkv").weight
    expected = p.detach().clone()
    for k in range(1, 6):
        with torch.no_grad():
            p.add_(0.01 * k)
        ema.update()
        d = min(0.9, (1 + k) / (10 + k))
        expected = d * expected + (1 - d) * p.detach()
        torch.testing.assert_close(shadow, expected)
    assert int(model.ema.num_updates) == 5


def test_no_warmup_uses_fixed_decay():
    model = tiny_model()
    ema = EMA(model, decay=0.5, warmup=False)
    assert ema.current_decay() == 0.5


def test_state_dict_carries_ema_by_parameter_name():
    model = tiny_model()
    attach_ema(model, decay=0.99)
    sd = model.state_dict()
    params = {n for n, _ in model.named_parameters()}
    assert {f"ema.{n}" for n in params} | {"ema.num_updates"} == {k for k in sd if k.startswith("ema.")}
    assert all(sd[f"ema.{n}"].dtype == torch.float32 for n in params)


def test_swapped_evaluates_with_shadows_and_restores_raw():
    model = tiny_model()
    ema = attach_ema(model, decay=0.5, warmup=False)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    ema.update()
    raw = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randint(0, 61, (1, 8))
    with ema.swapped():
        for n, p in model.named_parameters():
            torch.testing.assert_close(p, 0.75 * raw[n])  # 0.5 * w + 0.5 * 2w, raw is 2w
        swapped_out = model(x)
    for n, p in model.named_parameters():
        assert torch.equal(p, raw[n])
    assert not torch.allclose(swapped_out, model(x))


def test_clean_fqn_strips_wrappers():
    assert (
        clean_fqn("layers.0._orig_mod._checkpoint_wrapped_module.attention.wo.weight") == "layers.0.attention.wo.weight"
    )
