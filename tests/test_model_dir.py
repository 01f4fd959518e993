"""The model folder: typed config, atomic save and load, its tokenizer, and one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.errors import UserError
from aogpt_plugin.model_dir import FORMAT, load_model_dir, read_config, save_model


def test_save_then_load_round_trips_weights_and_config(tmp_path):
    model = tiny_model("adaln", vocab_size=50257, max_seq_len=16)
    save_model(model, str(tmp_path / "m"), step=12, weights="ema", note="x")
    config = read_config(str(tmp_path / "m"))
    assert config.model_args == model.model_args and config.step == 12 and config.weights == "ema"
    assert config.extra == {"note": "x"} and config.vocab_size == 50257
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["format"] == FORMAT and list(raw)[:7] == [
        "format",
        "format_version",
        "model_args",
        "tokenizer",
        "vocab_size",
        "step",
        "weights",
    ]
    loaded = load_model_dir(str(tmp_path / "m"))
    tokens = torch.randint(0, 50257, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(tokens), model(tokens))
    assert loaded.tokenizer().get_vocab_size() == 50257
    assert not any(p.requires_grad for p in loaded.model.parameters())


def test_saving_again_replaces_the_folder_and_leaves_no_temporary(tmp_path):
    save_model(tiny_model(seed=1), str(tmp_path / "m"))
    save_model(tiny_model(seed=2), str(tmp_path / "m"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("no_config", "cannot read config.json"),
        ("bad_json", "cannot read config.json"),
        ("other_format", "config.json is not an aogpt-converted config"),
        ("bad_args", "bad model_args in config.json"),
    ],
)
def test_bad_folders_are_one_line_errors(tmp_path, setup, message):
    path = tmp_path / "m"
    if setup != "missing":
        path.mkdir()
    config = {"format": FORMAT, "model_args": {"dim": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 61}}
    text = {
        "bad_json": "{",
        "other_format": json.dumps({"format": "hf"}),
        "bad_args": json.dumps({**config, "model_args": {"dim": 32, "heads": 4}}),
    }.get(setup)
    if text is not None:
        (path / "config.json").write_text(text)
    with pytest.raises(UserError, match=message) as info:
        read_config(str(path))
    assert "\n" not in str(info.value)


def test_a_tokenizer_whose_vocabulary_is_not_the_models_is_refused(tmp_path):
    save_model(tiny_model(vocab_size=97), str(tmp_path / "m"))  # 97 tokens, but gpt2 has 50257
    with pytest.raises(UserError, match="has a 97-token vocabulary but its tokenizer 'gpt2' has 50257"):
        read_config(str(tmp_path / "m")).build_tokenizer(str(tmp_path / "m"))


def test_a_folder_with_nan_weights_is_refused_by_name_and_none_is_ever_written(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny_model()
    with torch.no_grad():
        model.norm.weight[3] = float("inf")
    with pytest.raises(UserError, match="tensor 'norm.weight' holds 1 NaN/inf values"):
        save_model(model, str(tmp_path / "never"))
    assert list(tmp_path.iterdir()) == []  # not even a temporary is left
    save_model(tiny_model(), str(tmp_path / "m"))
    weights = tmp_path / "m" / "model.safetensors"
    state = load_file(str(weights))
    state["output.bias"][0] = float("nan")
    save_file(state, str(weights))
    with pytest.raises(UserError, match="model directory .*: tensor 'output.bias' holds 1 NaN/inf values"):
        load_model_dir(str(tmp_path / "m"), verify=False)  # (verified, the changed file is refused first)


def test_temporaries_of_a_killed_writer_are_removed_by_the_next_one(tmp_path):
    dead = tmp_path / ".aogpt-convert-999999999-abcd"  # no such pid
    dead.mkdir()
    (tmp_path / ".aogpt-convert-999999999-efgh.old").mkdir()
    alive = tmp_path / f".aogpt-convert-{__import__('os').getpid()}-live"  # a writer still running
    alive.mkdir()
    save_model(tiny_model(), str(tmp_path / "m"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m", alive.name])


def test_a_path_that_is_a_file_is_named_as_such(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="model directory .* is a file; give the folder"):
        read_config(str(tmp_path / "f"))


# ---- replacing only model folders, one writer per folder, checked weights ----


def _dcp_checkpoint(step_dir, model):
    import torch.distributed.checkpoint as dcp

    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.update({f"ema.{k}": v.clone() for k, v in model.named_parameters()})
    dcp.save(state, checkpoint_id=str(step_dir), no_dist=True)


def _main(argv):
    from aogpt_plugin.cli import main

    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_convert_force_never_deletes_a_folder_that_is_not_a_model_folder(tmp_path, capsys):
    _dcp_checkpoint(tmp_path / "ckpt" / "step-1", tiny_model(vocab_size=50257, max_seq_len=16))
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("my notes")
    code = _main(["convert", str(tmp_path / "ckpt"), str(target), "--force"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert "is not a model folder" in err and str(target) in err
    assert (target / "notes.txt").read_text() == "my notes" and sorted(p.name for p in target.iterdir()) == [
        "notes.txt"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "mine"]  # no lock file or temporary left


def test_force_does_not_delete_a_users_file_inside_a_model_folder(tmp_path):
    save_model(tiny_model(), str(tmp_path / "m"))
    (tmp_path / "m" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds 'notes.txt', which is not part of a model folder"):
        save_model(tiny_model(seed=3), str(tmp_path / "m"))
    assert (tmp_path / "m" / "notes.txt").read_text() == "mine"


def test_check_out_dir_keeps_the_exists_and_force_rule(tmp_path):
    from aogpt_plugin.model_dir import check_out_dir

    save_model(tiny_model(), str(tmp_path / "m"))
    with pytest.raises(UserError, match="already exists; pass --force to replace it"):
        check_out_dir(str(tmp_path / "m"))
    check_out_dir(str(tmp_path / "m"), force=True)  # a model folder: --force may replace it
    save_model(tiny_model(seed=1), str(tmp_path / "m"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # the lock went with the write


def _holder(out_dir):
    """Another process that has passed check_out_dir (holds the writer lock) and is still running."""
    import subprocess
    import sys

    code = (
        "import sys, time\nfrom aogpt_plugin.model_dir import check_out_dir\n"
        f"check_out_dir({str(out_dir)!r}, force=True)\nprint('locked', flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_into_the_same_folder_is_refused_and_the_lock_dies_with_the_first(tmp_path):
    out = tmp_path / "m"
    proc = _holder(out)
    try:
        with pytest.raises(UserError, match=rf"is being written by another aogpt process \(pid {proc.pid}\)") as info:
            save_model(tiny_model(), str(out))
        assert "\n" not in str(info.value) and not out.exists()
    finally:
        proc.kill()
        proc.wait()
    save_model(tiny_model(), str(out))  # the lock died with its process
    assert load_model_dir(str(out)).config.model_sha256 is not None


def test_convert_into_a_folder_another_convert_is_writing_is_refused_before_reading(tmp_path, capsys):
    proc = _holder(tmp_path / "out")
    try:
        code = _main(["convert", str(tmp_path / "no-checkpoint"), str(tmp_path / "out")])
    finally:
        proc.kill()
        proc.wait()
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "being written by another aogpt process" in err


def test_config_records_the_weights_sha256_and_a_changed_file_is_refused(tmp_path):
    import hashlib

    save_model(tiny_model(), str(tmp_path / "m"))
    weights = tmp_path / "m" / "model.safetensors"
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["model_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01  # one bit of a weight: still finite, still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"model.safetensors' does not match the sha256 recorded") as info:
        load_model_dir(str(tmp_path / "m"))
    assert "\n" not in str(info.value)
    load_model_dir(str(tmp_path / "m"), verify=False)  # told not to check


def test_a_folder_written_before_the_sha256_was_recorded_loads_unchecked(tmp_path):
    save_model(tiny_model(), str(tmp_path / "m"))
    config = tmp_path / "m" / "config.json"
    raw = json.loads(config.read_text())
    del raw["model_sha256"]
    config.write_text(json.dumps(raw))
    assert load_model_dir(str(tmp_path / "m")).config.model_sha256 is None


def test_a_tokenizer_smaller_than_the_weights_vocabulary_is_refused_even_for_sampling(tmp_path):
    """Reported: a hand-edited config.json whose tokenizer did not match the weights sampled silently (ids
    beyond the tokenizer). Sampling needs every id the weights can produce to exist in it."""
    import json

    save_model(tiny_model(vocab_size=97), str(tmp_path / "m"))
    config = tmp_path / "m" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"tokenizer": "symbols:64"}))
    with pytest.raises(UserError) as info:
        read_config(str(tmp_path / "m")).build_tokenizer(str(tmp_path / "m"), check_vocab=False)
    assert str(info.value).startswith(
        f"model '{tmp_path}/m': its weights have a 97-token vocabulary (model_args.vocab_size) but its config.json "
        "names the tokenizer 'symbols:64' of 64 tokens"
    )
    config.write_text(json.dumps(json.loads(config.read_text()) | {"tokenizer": "symbols:97"}))
    assert read_config(str(tmp_path / "m")).build_tokenizer(str(tmp_path / "m"), check_vocab=False)
