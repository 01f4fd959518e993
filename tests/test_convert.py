"""convert.py: model args read off parameter shapes, and one-line refusals of checkpoints that would
write NaN/inf weights, bytes that are not a checkpoint, or an output folder that cannot exist; a
full disk and a signal are one line, with nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tiny_model

from aogpt_plugin.convert import convert, infer_model_args
from aogpt_plugin.errors import UserError


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
@pytest.mark.parametrize("overrides", [{}, {"target_pe_dim": 16, "n_heads": 2, "bias": False, "mlp_ratio": 2}])
def test_infer_model_args_recovers_every_hyper_parameter(conditioning, overrides):
    if conditioning != "adaln":
        overrides = {k: v for k, v in overrides.items() if k != "target_pe_dim"}  # only adaLN has the table
    model = tiny_model(conditioning, vocab_size=70, **overrides)  # 70 tokens, embedding padded to 128
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    inferred = infer_model_args(shapes, vocab_size=70)
    assert inferred == model.model_args
    assert inferred.padded_vocab_size == 128


def test_infer_model_args_refuses_a_tokenizer_whose_vocabulary_the_embedding_cannot_hold():
    """Reported: `--tokenizer symbols:100` on a GPT-2 run wrote vocab_size 100, and sampling gave garbage.
    For a checkpoint without a record the embedding's rows (padded to 64) bound the vocabulary both ways."""
    with pytest.raises(UserError, match="no aogpt parameter 'tok_embeddings.weight'"):
        infer_model_args({"weight": torch.Size([2, 2])}, vocab_size=10)
    shapes = {k: v.shape for k, v in tiny_model(vocab_size=50257).state_dict().items()}  # 50304 rows
    assert infer_model_args(shapes, vocab_size=50257).vocab_size == 50257
    for vocab, spec in ((100, "symbols:100"), (50400, "symbols:50400")):  # smaller, larger
        with pytest.raises(
            UserError,
            match=f"--tokenizer '{spec}' has {vocab} tokens but the checkpoint's embedding "
            "has 50304 rows \\(a vocabulary of 50241..50304 tokens\\)",
        ):
            infer_model_args(shapes, vocab_size=vocab, tokenizer=spec)


def _dcp_checkpoint(step_dir, model, nan_in: str | None = None):
    """A DCP checkpoint as torchtitan writes one: model weights and EMA shadows by name."""
    import torch.distributed.checkpoint as dcp

    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.update({f"ema.{k}": v.clone() for k, v in model.named_parameters()})
    if nan_in is not None:
        state[nan_in].view(-1)[0] = float("nan")
    dcp.save(state, checkpoint_id=str(step_dir), no_dist=True)


@pytest.mark.parametrize("weights", ["raw", "ema"])
def test_a_checkpoint_with_nan_weights_is_refused_by_tensor_name(tmp_path, weights):
    model = tiny_model(vocab_size=50257, max_seq_len=16)
    name = "layers.1.attention.wqkv.weight"
    _dcp_checkpoint(tmp_path / "ckpt" / "step-3", model, nan_in=name if weights == "raw" else f"ema.{name}")
    with pytest.raises(UserError, match=f"tensor '{name}' holds 1 NaN/inf values") as info:
        convert(str(tmp_path / "ckpt"), str(tmp_path / "out"), weights=weights)
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
    other = "raw" if weights == "ema" else "ema"
    convert(str(tmp_path / "ckpt"), str(tmp_path / "out"), weights=other)  # the clean copy converts


def test_data_files_that_are_not_the_checkpoint_are_one_line(tmp_path):
    _dcp_checkpoint(tmp_path / "step-1", tiny_model(vocab_size=50257, max_seq_len=16))
    data = next((tmp_path / "step-1").glob("*.distcp"))
    data.write_bytes(bytes(range(256)) * (data.stat().st_size // 256 + 1))  # garbage, long enough
    with pytest.raises(UserError, match="its data files cannot be read as the tensors its .metadata describes") as info:
        convert(str(tmp_path / "step-1"), str(tmp_path / "out"))
    assert "\n" not in str(info.value)


def test_an_output_folder_that_cannot_exist_is_refused_before_reading(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="cannot be created: .*afile' is a file"):
        convert(str(tmp_path / "no-checkpoint-needed"), str(tmp_path / "afile" / "model"))
    with pytest.raises(UserError, match="output directory .*afile' is a file"):
        convert(str(tmp_path / "no-checkpoint-needed"), str(tmp_path / "afile"), force=True)


def test_a_device_as_out_dir_is_refused_before_reading(tmp_path):
    for out, kind in (("/dev/full", "a character device"), ("/dev/null", "a character device")):
        with pytest.raises(UserError, match=f"output directory '{out}' is {kind}; give a folder path"):
            convert(str(tmp_path / "no-checkpoint-needed"), out)


def test_a_real_full_disk_is_one_line_naming_the_bytes_and_leaves_nothing(tmp_path, small_disk, capsys):
    """Reported: a 17-line `SafetensorError ... No space left on device` traceback."""
    from aogpt_plugin.cli import main

    _dcp_checkpoint(tmp_path / "ckpt" / "step-3", tiny_model(vocab_size=50257, max_seq_len=16))
    disk = small_disk("1m")
    assert main(["convert", str(tmp_path / "ckpt"), str(disk / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the disk is full: writing '{disk}/m' failed (No space left on device); it needs ")
    assert err.rstrip().endswith("are free there; nothing was left behind") and os.listdir(disk) == []


@pytest.mark.parametrize(("command", "signum"), [("convert", signal.SIGINT), ("export", signal.SIGTERM)])
def test_a_signal_while_writing_is_one_line_and_removes_the_temporary(tmp_path, command, signum):
    """Reported: Ctrl-C during `aogpt convert`/`export` printed a KeyboardInterrupt traceback."""
    _dcp_checkpoint(tmp_path / "ckpt" / "step-3", tiny_model(vocab_size=50257, max_seq_len=16))
    out = tmp_path / "out" / "m"
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "slow_save_command.py"),
            command,
            str(tmp_path / "ckpt"),
            str(out),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        if line.startswith("weights written"):
            break
    assert [n for n in os.listdir(tmp_path / "out") if n.startswith(".aogpt-convert-")]  # mid-write
    proc.send_signal(signum)
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signum
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
    assert err.splitlines() == [f"stopped by {name}; '{out}' was not written (nothing was left behind)"]
    assert os.listdir(tmp_path / "out") == []  # no temporary, no lock file


# ---- aogpt convert --from-hf ------------------------------------------------------------------------
def _convert_cli(capsys, argv):
    from aogpt_plugin.cli import main

    try:
        code = main(["convert", *argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_from_hf_writes_a_model_folder_that_reads_as_the_gpt2(tmp_path, capsys, weights):
    pytest.importorskip("transformers")
    from conftest import gpt2_logits, tiny_gpt2

    from aogpt_plugin.model_dir import load_model_dir

    gpt2 = tiny_gpt2(tmp_path / "hf", weights=weights)
    code, out, err = _convert_cli(capsys, ["--from-hf", str(tmp_path / "hf"), str(tmp_path / "ao")])
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"converted GPT-2 {tmp_path / 'hf'} -> {tmp_path / 'ao'}: 2L/32d/4H")
    loaded = load_model_dir(str(tmp_path / "ao"))
    assert loaded.args.gpt2_backbone and loaded.args.max_seq_len == 32 and loaded.config.tokenizer == "gpt2"
    assert loaded.config.extra["from_hf"] == {"model_type": "gpt2", "target_table_seed": 0}
    tokens = torch.randint(0, 50256, (2, 32), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded.model(tokens)[..., :50257], gpt2_logits(gpt2, tokens), atol=1e-5, rtol=0)
    again = tmp_path / "again"
    assert _convert_cli(capsys, ["--from-hf", str(tmp_path / "hf"), str(again)])[0] == 0
    assert (again / "model.safetensors").read_bytes() == (tmp_path / "ao" / "model.safetensors").read_bytes()


def test_from_hf_bad_input_is_one_line_before_any_weight_is_read_and_writes_nothing(tmp_path, capsys):
    pytest.importorskip("transformers")
    from conftest import tiny_gpt2

    tiny_gpt2(tmp_path / "hf")
    (tmp_path / "damaged").mkdir()
    tiny_gpt2(tmp_path / "damaged")
    (tmp_path / "damaged" / "model.safetensors").write_bytes(b"no safetensors header")
    (tmp_path / "bos").mkdir()
    tiny_gpt2(tmp_path / "bos", bos_token_id=7)
    (tmp_path / "taken").mkdir()
    hf, out = str(tmp_path / "hf"), str(tmp_path / "out")
    cases = [
        (["--from-hf", str(tmp_path / "nope"), out], "--from-hf='.*nope' does not exist"),
        (
            ["--from-hf", hf, out, "--tokenizer", "symbols:61"],
            "vocabulary of 50257 tokens .* --tokenizer 'symbols:61' has 61",
        ),
        (
            ["--from-hf", str(tmp_path / "bos"), out],
            "begins texts with token 7 \\(bos_token_id\\) but --tokenizer='gpt2' ends them with 50256",
        ),
        (["--from-hf", hf, out, "--weights", "raw"], "--weights applies to a checkpoint"),
        (["--from-hf", hf, out, str(tmp_path / "x")], "with --from-hf give OUT_DIR alone"),
        (["--from-hf", hf, str(tmp_path / "taken")], "already exists; pass --force"),
        ([hf], "give CHECKPOINT_DIR OUT_DIR \\(or --from-hf HF_DIR OUT_DIR\\)"),
        (["--from-hf", str(tmp_path / "damaged"), out], "GPT-2 folder '.*damaged': cannot read model.safetensors"),
    ]
    for argv, message in cases:
        code, _out, err = _convert_cli(capsys, argv)
        assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
        assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bos", "damaged", "hf", "taken"]
