"""`aogpt serve`'s own flags: a bad one is one `error:` line and exit 2, before any weight is read."""

from __future__ import annotations

import pytest

from aogpt_plugin.cli import main


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--slots", "0"], "--slots 0"),
        (["--max-tokens", "49"], "--max-tokens 49 is outside 1..48 (the model's positions)"),
        (["--api-key-file", "/nonexistent/key"], "--api-key-file '/nonexistent/key' cannot be read"),
        (["--port", "70000"], "--port 70000 is outside 0..65535"),
        (["--batching", "sometimes"], "invalid choice: 'sometimes'"),
        (["--graphs", "maybe"], "invalid choice"),
    ],
)
def test_a_bad_flag_is_one_line_before_the_weights(capsys, symbols_dir, tmp_path, flags, message):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(symbols_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")  # read: another error
    try:
        code = main(["serve", "--model", str(broken), *flags])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and message in err[0], err
