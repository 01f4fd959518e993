"""DCP checkpoints on disk: the step folder a conversion or a resume uses, and what a save holds."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.checkpoints import newest_complete_step, resolve_step_dir, saved_world
from aogpt_plugin.errors import UserError


def _step(root, n: int, complete: bool):
    d = root / f"step-{n}"
    d.mkdir()
    if complete:
        (d / ".metadata").write_bytes(b"")
    return d


def test_resolve_step_dir_picks_the_newest_complete_step(tmp_path):
    _step(tmp_path, 10, True)
    _step(tmp_path, 20, True)
    _step(tmp_path, 30, False)  # a save that was killed: no .metadata
    assert resolve_step_dir(str(tmp_path), None) == (str(tmp_path / "step-20"), 20)
    assert resolve_step_dir(str(tmp_path), 10) == (str(tmp_path / "step-10"), 10)
    assert resolve_step_dir(str(tmp_path / "step-10"), None) == (str(tmp_path / "step-10"), 10)


@pytest.mark.parametrize(
    ("layout", "step", "message"),
    [
        ("missing", None, "does not exist"),
        ("file", None, "is a file; give a step-N folder"),
        ("empty", None, "holds neither a DCP checkpoint"),
        ("incomplete", None, r"has step folders \[5\] but none is complete"),
        ("complete", 7, r"--step 7 not found .*available: \[5\]"),
        ("step_dir", 6, "--step 6 disagrees with"),
    ],
)
def test_resolve_step_dir_errors_are_one_line(tmp_path, layout, step, message):
    root = tmp_path / "ckpt"
    if layout == "file":
        root.write_text("not a folder")
    elif layout != "missing":
        root.mkdir()
    if layout in ("incomplete", "complete", "step_dir"):
        _step(root, 5, layout != "incomplete")
    target = root / "step-5" if layout == "step_dir" else root
    with pytest.raises(UserError, match=message) as info:
        resolve_step_dir(str(target), step)
    assert "\n" not in str(info.value)


def test_newest_complete_step_skips_a_save_that_was_killed(tmp_path):
    assert newest_complete_step(str(tmp_path / "none")) is None
    _step(tmp_path, 4, True)
    _step(tmp_path, 8, False)
    assert newest_complete_step(str(tmp_path)) == 4


def test_saved_world_reads_the_data_parallel_degree_and_whether_the_optimizer_is_there(tmp_path):
    import torch.distributed.checkpoint as dcp

    full = {"w": torch.ones(2), "optimizer.state.w.exp_avg": torch.ones(2)}
    full.update({f"dataloader.dp_rank_{r}": torch.tensor([r]) for r in range(3)})
    dcp.save(full, checkpoint_id=str(tmp_path / "full"), no_dist=True)
    assert saved_world(str(tmp_path / "full")) == {"dp_degree": 3, "has_optimizer": True}
    dcp.save({"w": torch.ones(2)}, checkpoint_id=str(tmp_path / "model_only"), no_dist=True)
    assert saved_world(str(tmp_path / "model_only")) == {"dp_degree": None, "has_optimizer": False}
