"""adaLN tables: row t is exactly what the block's adaLN Linear gives for target position t."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aogpt_plugin.sampler.decode_view import build_view
from aogpt_plugin.sampler.modulation import ModulationTable, tabulate_modulation

from .models import build_model


def test_table_rows_equal_adaln_of_each_target():
    model = build_model("adaln", seed=2)
    block = model.layers["1"]
    table = ModulationTable(block.adaln, model.target_embeddings)
    targets = torch.tensor([[0, 5, 39], [7, 7, 1]])
    expected = block.adaln(F.silu(model.target_embeddings(targets)))
    torch.testing.assert_close(table(targets.unsqueeze(-1)), expected)


def test_every_adaln_is_tabulated_and_other_conditionings_are_left_alone():
    view = build_view(build_model("adaln"), "aten").model
    assert all(isinstance(b.adaln, ModulationTable) for b in view.layers.values())
    assert isinstance(view.final_adaln, ModulationTable)
    for conditioning in ("none", "concat"):
        model = build_model(conditioning)
        assert not tabulate_modulation(model)
        assert model.final_adaln is None
