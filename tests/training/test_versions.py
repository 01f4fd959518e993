"""torchtitan 0.3.0 on a torch that lacks what it imports (torch 2.11, the GPU image's): one line."""

from __future__ import annotations

import pytest
import torch.distributed.fsdp as fsdp

from aogpt_plugin.errors import ConfigError
from aogpt_plugin.training import versions


def test_titan03_on_a_torch_without_data_parallel_mesh_dims_is_one_line(monkeypatch):
    monkeypatch.setattr(versions, "is_titan03", lambda: True)
    monkeypatch.delattr(fsdp, "DataParallelMeshDims", raising=False)
    with pytest.raises(
        ConfigError, match=r"needs a torch with torch\.distributed\.fsdp\.DataParallelMeshDims.*titan022"
    ):
        versions.check_torch_for_titan03()


def test_titan03_on_a_torch_that_has_it_and_titan022_on_any_torch_pass(monkeypatch):
    monkeypatch.setattr(fsdp, "DataParallelMeshDims", object, raising=False)
    monkeypatch.setattr(versions, "is_titan03", lambda: True)
    versions.check_torch_for_titan03()
    monkeypatch.delattr(fsdp, "DataParallelMeshDims")
    monkeypatch.setattr(versions, "is_titan03", lambda: False)
    versions.check_torch_for_titan03()
