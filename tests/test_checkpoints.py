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


def test_a_record_round_trips_with_its_tokenizer_copy(tmp_path):
    from aogpt_plugin.checkpoints import read_record, record_tokenizer, write_record

    tok = tmp_path / "tok.json"
    tok.write_text('{"model": "x"}')
    step_dir = tmp_path / "step-3"
    write_record(str(step_dir), {"model_args": {"dim": 8}, "tokenizer": "tokenizer.json", "step": 3}, str(tok))
    record = read_record(str(step_dir))
    assert record["model_args"] == {"dim": 8} and record["format"] == "aogpt-checkpoint"
    assert record_tokenizer(str(step_dir), record) == str(step_dir / "tokenizer.json")
    assert (step_dir / "tokenizer.json").read_text() == tok.read_text()
    assert read_record(str(tmp_path / "step-9")) is None  # an older checkpoint: no record
    (step_dir / "aogpt.json").write_text("{not json")
    with pytest.raises(UserError, match="aogpt.json' cannot be read"):
        read_record(str(step_dir))


def test_a_loss_is_normal_when_finite_and_not_a_spike_above_the_lowest_before_it():
    from aogpt_plugin.checkpoints import is_normal_loss

    assert is_normal_loss(10.8, None)
    assert is_normal_loss(4.0, 3.0) and is_normal_loss(3.1, 3.0)
    assert not is_normal_loss(4.6, 3.0)  # 1.5x the lowest loss so far: a spike
    assert not is_normal_loss(float("nan"), 3.0) and not is_normal_loss(float("inf"), None)


def test_the_healthy_checkpoint_is_judged_by_the_loss_its_weights_gave_next(tmp_path):
    """step-N's weights are first used by step N+1: a checkpoint followed by an exploded (finite) loss
    is not recommended, whatever its own step's loss was."""
    from aogpt_plugin.checkpoints import healthy_checkpoint, write_record

    for n in (2, 4, 6):
        _step(tmp_path, n, True)
    _step(tmp_path, 8, False)  # a killed save
    losses = {5: (3.0, True), 6: (3.1, True), 7: (2.6e11, False), 8: (float("nan"), False)}
    assert healthy_checkpoint(str(tmp_path), losses, failed_step=8) == 4  # step-6 gave 2.6e11 next
    assert healthy_checkpoint(str(tmp_path), {7: (3.0, True)}, failed_step=8) == 6
    # the history before this process (a resumed run) comes from the step folders' records
    write_record(str(tmp_path / "step-4"), {"model_args": {}, "losses": {"3": [4.0, True], "4": [3.5, True]}})
    assert healthy_checkpoint(str(tmp_path), {}, failed_step=8) == 2  # step 3 was normal; 5 and 7 unknown
    assert healthy_checkpoint(str(tmp_path), {3: (9e9, False)}, failed_step=5) is None  # memory wins
