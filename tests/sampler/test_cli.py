"""`aogpt sample`: one-line errors (exit 2) for bad arguments, and a working --json run."""

from __future__ import annotations

import json
import re

import pytest
from conftest import tiny_model

from aogpt_plugin.cli import main
from aogpt_plugin.model_dir import save_model
from aogpt_plugin.seeding import sample_seed


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "model"
    save_model(tiny_model("adaln", max_seq_len=24, preset="sampler"), str(path))
    return str(path)


@pytest.fixture(scope="module")
def broken_weights_dir(tmp_path_factory, model_dir):
    """Valid config.json, unreadable weights: argument errors must come before any weight loading."""
    import shutil

    path = tmp_path_factory.mktemp("cli") / "broken"
    shutil.copytree(model_dir, path)
    (path / "model.safetensors").write_bytes(b"not safetensors")
    return str(path)


def run_cli(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


BAD = [
    (["--steps", "0"], "steps=0"),
    (["--steps", "17"], "steps=17"),
    (["--top-p", "0"], "top_p=0.0"),
    (["--top-p", "1.2"], "top_p=1.2"),
    (["--temperature", "0"], "temperature=0.0"),
    (["--temperature", "-1"], "temperature=-1.0"),
    (["--top-k", "0"], "top_k=0"),
    (["--length", "25"], "length=25 is outside the model's positions; allowed: 1..24"),
    (["--num-samples", "0"], "num_samples=0"),
    (["--infill", '{"spans": [{"start": 16, "tokens": [1]}]}'], "position 16"),
    (["--infill", '{"spans": [{"start": 3, "tokens": [1, 2]}, {"start": 4, "tokens": [3]}]}'], "given twice"),
    (["--infill", '{"spans": [{"start": 0, "tokens": [61]}]}'], "token id 61"),
    (["--prompt", " hello world"], "outside the vocabulary"),  # GPT-2 ids >= this model's 61
    (["--infill", "{oops"], "not valid JSON"),
    (["--order", "r2l"], "invalid choice"),
    (["--speculative", "0"], "--speculative 0 is not allowed"),
    (["--speculative", "3", "--steps", "4"], "--steps does not apply with --speculative"),
    (["--speculative", "auto", "--counts", "binomial"], "--counts does not apply"),
    (["--backend", "flex", "--graphs", "on"], "backend='flex' cannot be compiled into the step on cpu"),
    (["--decode-attention", "partial,split=0"], "decode_attention='partial,split=0': split=0 is not in 1..64"),
    (["--decode-attention", "partial"], "decode_attention='partial' sets the static step's FlexAttention"),
]


@pytest.mark.parametrize("extra,match", BAD)
def test_bad_arguments_give_one_line_and_exit_2(capsys, broken_weights_dir, extra, match):
    code, out, err = run_cli(capsys, ["sample", "--model", broken_weights_dir, "--length", "16", *extra])
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and match in lines[0], err


@pytest.mark.parametrize("which", ["missing", "broken"])
def test_unreadable_model_dir(capsys, tmp_path, broken_weights_dir, which):
    path = str(tmp_path / "nope") if which == "missing" else broken_weights_dir
    code, out, err = run_cli(capsys, ["sample", "--model", path, "--length", "8", "--steps", "2"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error:"), err


def test_sample_json(capsys, model_dir):
    argv = ["sample", "--model", model_dir, "--num-samples", "2", "--length", "20", "--steps", "5", "--json"]
    argv += ["--infill", '{"spans": [{"start": 4, "tokens": [7, 8]}]}', "--counts", "binomial", "--seed", "3"]
    code, out, err = run_cli(capsys, argv)
    assert code == 0, err
    data = json.loads(out)
    assert len(data["tokens"]) == 2 and all(len(t) == 20 for t in data["tokens"])
    assert all(t[4:6] == [7, 8] for t in data["tokens"])
    assert len(data["text"]) == 2 and isinstance(data["text"][0], str)
    assert data["samples"][0]["tokens"] == data["tokens"][0]
    assert data["steps"] == 5 and 1 <= data["forward_passes"] <= 5
    assert data["tokens_per_second"] > 0 and data["device"].startswith("cpu")
    code2, out2, _ = run_cli(capsys, argv)
    assert json.loads(out2)["tokens"] == data["tokens"]  # seeded


def test_speculative_json_reports_forwards_and_accepted_tokens(capsys, model_dir):
    argv = ["sample", "--model", model_dir, "--num-samples", "2", "--length", "20", "--speculative", "3", "--json"]
    argv += ["--infill", '{"spans": [{"start": 4, "tokens": [7, 8]}]}', "--seed", "3"]
    code, out, err = run_cli(capsys, argv)
    assert code == 0, err
    data = json.loads(out)
    assert all(t[4:6] == [7, 8] for t in data["tokens"])
    assert data["speculative"] == 3 and data["draft_sizes"] == [3]
    assert 1 <= data["forward_passes"] <= 18  # never more forwards than tokens of a sample
    assert data["tokens_per_forward"] == round(18 / data["forward_passes"], 4)
    assert 0 < data["draft_acceptance_rate"] < 1
    assert json.loads(run_cli(capsys, argv)[1])["tokens"] == data["tokens"]  # seeded
    code, _, err = run_cli(capsys, ["sample", "--model", model_dir, "--length", "12", "--speculative", "auto"])
    assert code == 0 and "tokens per forward" in err and "forward passes" in err


def test_sample_text(capsys, model_dir):
    argv = ["sample", "--model", model_dir, "--length", "8", "--steps", "8", "--order", "l2r", "--no-progress"]
    code, out, err = run_cli(capsys, argv)
    assert code == 0 and out.startswith("=== sample 0 ===") and "8 forward passes" in err


def test_an_infill_file_that_is_not_utf8_is_one_line(capsys, model_dir, tmp_path):
    spec = tmp_path / "spans.json"
    spec.write_bytes(b'{"spans": [{"start": 0, "text": "caf\xe9"}]}')
    code, out, err = run_cli(capsys, ["sample", "--model", model_dir, "--length", "8", "--infill", f"@{spec}"])
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"error: --infill file '{spec}' is not UTF-8 text (byte 36)"]  # the \\xe9


def _sample_process(model_dir, *extra, env=None, pipe_to=None):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", model_dir, "--num-samples", "40"]
    cmd += ["--length", "24", "--steps", "6", "--no-progress", *extra]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if pipe_to is None:
        return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, timeout=120)
    writer = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = subprocess.run(pipe_to, stdin=writer.stdout, capture_output=True, timeout=120)
    writer.stdout.close()
    _, err = writer.communicate(timeout=120)
    return reader, writer.returncode, err


def test_output_cut_short_by_a_pipe_is_not_a_traceback(model_dir):
    """`aogpt sample | head -1`: the reader leaves after one line; the writer must end quietly."""
    reader, code, err = _sample_process(model_dir, pipe_to=["head", "-1"])
    assert reader.stdout.decode().startswith("=== sample 0 ===")
    assert code == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]


def test_a_terminal_that_cannot_show_the_text_gets_it_escaped(model_dir):
    proc = _sample_process(model_dir, env={"PYTHONIOENCODING": "ascii"})  # the samples hold non-ASCII bytes
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "extra",
    [
        [],  # T = n
        pytest.param(["--steps", "5", "--counts", "binomial"], marks=pytest.mark.slow),  # parallel, ragged steps
        ["--infill", '{"spans": [{"start": 0, "tokens": [5, 6]}, {"start": 9, "tokens": [7]}]}', "--steps", "4"],
        ["--speculative", "auto"],
    ],
    ids=["T=n", "binomial", "prompt", "speculative"],
)
def test_graphs_on_samples_what_graphs_off_samples(capsys, model_dir, extra):
    """On a CPU `--graphs on` runs the inductor-compiled static step: the same samples as the dynamic sampler."""
    records = {}
    for graphs in ("off", "on"):
        argv = ["sample", "--model", model_dir, "--num-samples", "3", "--length", "16", "--seed", "5", "--json"]
        code, out, err = run_cli(capsys, [*argv, "--no-progress", "--graphs", graphs, *extra])
        assert code == 0, err
        records[graphs] = json.loads(out)
    assert records["on"]["tokens"] == records["off"]["tokens"]
    assert records["on"]["forward_passes"] == records["off"]["forward_passes"]
    assert records["on"]["graphs"] == "on"


# ---- many requests: --requests FILE --out RESULTS ----------------------------------------------
REQUESTS = [
    {"prompt": "5 6 7", "length": 20},
    {"infill": {"spans": [{"start": 3, "tokens": [9, 10]}]}, "length": 16, "seed": 42},
    {},
    {"order": "l2r", "length": 12},
    {"prompt": "1", "length": 10, "order": "l2r"},
    {"infill": [{"start": 0, "text": "3 4"}, {"start": 8, "tokens": [2]}], "length": 14},
    {"temperature": 0.7, "length": 11},
]


@pytest.fixture(scope="module")
def symbols_dir(tmp_path_factory):
    """A model whose tokenizer reads integers (symbols:61), so request prompts are text."""
    path = tmp_path_factory.mktemp("cli") / "symbols"
    save_model(tiny_model("adaln", max_seq_len=24, preset="sampler"), str(path), tokenizer="symbols:61")
    return str(path)


def write_requests(path, requests=REQUESTS) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return str(path)


def run_requests(capsys, model, requests, out, *extra):
    argv = ["sample", "--model", model, "--requests", requests, "--out", str(out), "--no-progress", *extra]
    return run_cli(capsys, argv)


def test_requests_give_each_request_what_aogpt_sample_gives_it_alone(capsys, tmp_path, symbols_dir):
    """One result a line in input order; line i holds the tokens `aogpt sample` draws for request i alone
    (its options as flags, its seed its own or sample i of --seed's), whatever the batch size."""
    requests = write_requests(tmp_path / "r.jsonl")
    out_file = tmp_path / "out.jsonl"
    code, out, err = run_requests(
        capsys, symbols_dir, requests, out_file, "--batch-size", "3", "--seed", "100", "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["requests"] == summary["sampled"] == 7 and summary["tokens_per_second"] > 0
    assert "7 requests sampled (0 already in" in err and "requests/s" in err and "tokens/s" in err
    results = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["index"] for r in results] == list(range(7))
    for i, (request, result) in enumerate(zip(REQUESTS, results, strict=True)):
        seed = request.get("seed", sample_seed(100, i))
        flags = ["--seed", str(seed), "--length", str(request.get("length", 24))]
        for key in ("prompt", "order", "temperature"):
            flags += [f"--{key}", str(request[key])] if key in request else []
        if "infill" in request:
            spans = request["infill"]
            flags += ["--infill", json.dumps(spans if isinstance(spans, dict) else {"spans": spans})]
        code, alone, err = run_cli(capsys, ["sample", "--model", symbols_dir, "--json", "--no-progress", *flags])
        assert code == 0, err
        assert json.loads(alone)["tokens"][0] == result["tokens"], i
        assert result["seed"] == seed and result["length"] == len(result["tokens"])
        assert result["request"] == request and result["options"]["seed"] == seed
    assert results[0]["tokens"][:3] == [5, 6, 7] and results[1]["tokens"][3:5] == [9, 10]


def test_the_batch_size_and_graphs_mode_do_not_change_the_results(capsys, tmp_path, symbols_dir):
    requests = write_requests(tmp_path / "r.jsonl")
    files = {}
    for name, extra in (("b1", ["--batch-size", "1"]), ("b4", ["--batch-size", "4"]), ("static", ["--graphs", "static", "--batch-size", "4"])):  # fmt: skip
        files[name] = tmp_path / f"{name}.jsonl"
        code, _, err = run_requests(capsys, symbols_dir, requests, files[name], "--seed", "100", *extra)
        assert code == 0, err
    assert files["b1"].read_text() == files["b4"].read_text() == files["static"].read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--out", "x.jsonl"], "--out applies with --requests FILE.jsonl"),
        (["--requests", "r.jsonl"], "--requests needs --out RESULTS.jsonl"),
        (["--requests", "r.jsonl", "--out", "o.jsonl", "--prompt", "1"], "--prompt does not apply with --requests"),
        (["--requests", "r.jsonl", "--out", "o.jsonl", "--num-samples", "2"], "--num-samples does not apply"),
        (["--requests", "r.jsonl", "--out", "o.jsonl", "--batch-size", "0"], "--batch-size 0: the requests sampled"),
        (["--requests", "r.jsonl", "--out", "."], "--out '.' is a folder"),
    ],
)
def test_bad_request_flags_are_one_line(capsys, tmp_path, monkeypatch, broken_weights_dir, extra, message):
    monkeypatch.chdir(tmp_path)
    write_requests(tmp_path / "r.jsonl")
    code, out, err = run_cli(capsys, ["sample", "--model", broken_weights_dir, *extra])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_bad_request_line_is_one_error_before_the_weights_are_read(capsys, tmp_path, broken_weights_dir):
    """The weights of this folder cannot be read: the error is the request's, so nothing was loaded."""
    requests = write_requests(tmp_path / "r.jsonl", [{"length": 8}, {"length": 8}, {"steps": 9, "length": 8}])
    code, out, err = run_requests(capsys, broken_weights_dir, requests, tmp_path / "out.jsonl")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"error: {requests} line 3, field 'steps': steps=9 is outside the allowed range 1..8 (positions to generate)"
    ]
    assert not (tmp_path / "out.jsonl").exists()


def test_a_run_stopped_by_sigterm_resumes_to_the_uninterrupted_output(capsys, tmp_path, symbols_dir):
    """SIGTERM after a few results: one line, exit 143, complete lines only; the same command then writes the
    rest, and the file equals an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    requests = write_requests(tmp_path / "r.jsonl", [{"seed": i, "length": 24} for i in range(60)])
    whole = tmp_path / "whole.jsonl"
    assert run_requests(capsys, symbols_dir, requests, whole, "--batch-size", "2")[0] == 0
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", symbols_dir, "--requests", requests]
    cmd += ["--out", str(out), "--batch-size", "2", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 4:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    kept = out.read_text()
    assert err.strip().splitlines()[-1].startswith("stopped by SIGTERM; ") and "results are in" in err
    assert kept.endswith("\n") and 4 <= kept.count("\n") < 60
    code, _, err = run_requests(capsys, symbols_dir, requests, out, "--batch-size", "2")
    assert code == 0 and f"already in {out}" in err
    assert out.read_text() == whole.read_text()


@pytest.mark.parametrize(
    "second, message",
    [
        ("other", "line 1 answers another request: its request's 'prompt' is \"5 6 7\", this run's is \"8 9\""),
        ("seed", "line 1 answers another request: its seed is 100, this run's is 101"),
        ("model", "line 1 answers another request: its model is "),
    ],
)
def test_a_resumed_out_keeps_only_lines_of_the_same_requests_and_options(
    capsys, tmp_path, symbols_dir, second, message
):
    """Reported: OUT holding results of another requests file with as many lines (or of the same file with
    another --seed) was resumed, keeping lines that answer other requests. Now the first difference is one
    line, before any weight is read (the second run's folder holds unreadable weights), and OUT is kept."""
    import shutil

    requests = write_requests(tmp_path / "r.jsonl")
    out = tmp_path / "out.jsonl"
    assert run_requests(capsys, symbols_dir, requests, out, "--seed", "100")[0] == 0
    content = out.read_text()
    model, seed = tmp_path / "model", "100"
    shutil.copytree(symbols_dir, model)
    (model / "model.safetensors").write_bytes(b"not safetensors")
    if second == "model":  # another model's record
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "model_sha256": "0" * 64}))
    if second == "other":
        requests = write_requests(tmp_path / "r2.jsonl", [{**REQUESTS[0], "prompt": "8 9"}, *REQUESTS[1:]])
    if second == "seed":
        seed = "101"
    code, stdout, err = run_requests(capsys, str(model), requests, out, "--seed", seed)
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert f"error: --out '{out}' {message}" in err and "give another --out, or delete" in err
    assert out.read_text() == content


def test_two_runs_on_one_out_the_second_is_refused_naming_the_first(capsys, tmp_path, symbols_dir):
    """Reported: two runs writing one --out both exited 0 with 400 interleaved lines for 200 requests. The
    second is refused in one line with the first's pid; the first finishes a whole file."""
    import os
    import subprocess
    import sys
    import time

    from conftest import ROOT

    total = 120  # the first run outlasts the second's start-up
    requests = write_requests(tmp_path / "r.jsonl", [{"seed": i, "length": 24} for i in range(total)])
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", symbols_dir, "--requests", requests]
    cmd += ["--out", str(out), "--batch-size", "1", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 2):
        time.sleep(0.02)
    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2 and second.stderr.strip().splitlines() == [
        f"error: --out '{out}' is being written by another aogpt process (pid {first.pid}); two runs would "
        "interleave their lines: wait for it to finish, or give another --out"
    ]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(total))
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and f"0 requests sampled ({total} already in" in again.stderr  # the lock is gone


def test_a_killed_runs_lock_is_taken_over(capsys, tmp_path, symbols_dir):
    """A run killed outright (SIGKILL: no clean-up) leaves its lock file; the kernel dropped its lock, so the
    same command goes on from its complete lines."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    requests = write_requests(tmp_path / "r.jsonl", [{"seed": i, "length": 24} for i in range(40)])
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", symbols_dir, "--requests", requests]
    cmd += ["--out", str(out), "--batch-size", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 2):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert (tmp_path / ".out.jsonl.aogpt-lock").exists()
    code, _, err = run_requests(capsys, symbols_dir, requests, out, "--batch-size", "2")
    assert code == 0 and "already in" in err and out.read_text().count("\n") == 40


def test_a_requests_file_that_is_not_utf8_is_one_line_naming_line_and_byte(capsys, tmp_path, broken_weights_dir):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"length": 8}\n{"prompt": "caf\xe9"}\n')
    code, out, err = run_requests(capsys, broken_weights_dir, str(path), tmp_path / "out.jsonl")
    assert code == 2 and err.strip().splitlines() == [
        f"error: {path} line 2: byte 16 (0xe9) is not UTF-8; save the file as UTF-8"
    ]


def test_a_real_full_disk_keeps_the_complete_results_and_the_same_command_goes_on(
    capsys, tmp_path, symbols_dir, small_disk
):
    """--out on a filesystem that fills up: one line (what is kept, how to go on), no traceback, no cut line;
    with room again, the same command completes the file as an uninterrupted run writes it."""
    from conftest import fill_disk

    requests = write_requests(tmp_path / "r.jsonl", [{"seed": i, "length": 24} for i in range(30)])
    whole = tmp_path / "whole.jsonl"
    assert run_requests(capsys, symbols_dir, requests, whole, "--batch-size", "4")[0] == 0
    disk = small_disk("1m")
    out = disk / "out.jsonl"
    fill_disk(disk, leave=4096 + len(whole.read_bytes()) // 2)  # the lock file takes a page
    code, stdout, err = run_requests(capsys, symbols_dir, requests, out, "--batch-size", "4")
    assert code == 2 and "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert re.match(
        rf"error: the disk is full: writing --out '{out}' failed \(No space left on device\); its \d+ ", line
    )
    assert "free some space, then the same command goes on from there" in line
    kept = out.read_text()
    assert kept.endswith("\n") and 0 < kept.count("\n") < 30 and whole.read_text().startswith(kept)
    (disk / "filler").unlink()
    assert run_requests(capsys, symbols_dir, requests, out, "--batch-size", "4")[0] == 0
    assert out.read_text() == whole.read_text()


def test_ctrl_c_with_the_progress_bar_drawn_is_one_line_of_its_own_and_exit_130(tmp_path, symbols_dir):
    """The bar is closed before the stop's line, so the line starts a line (tqdm redraws with \\r, never \\n)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    requests = write_requests(tmp_path / "r.jsonl", [{"seed": i, "length": 24} for i in range(200)])
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "sample", "--model", symbols_dir, "--requests", requests]
    cmd += ["--out", str(out), "--batch-size", "1"]  # the bar drawn (no --no-progress)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 3):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.split("\n") if line.strip()]
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert lines[-1].startswith("stopped by Ctrl-C (SIGINT); ") and "results are in" in lines[-1], err[-2000:]
    assert sum(line.startswith(("error:", "stopped by")) for line in lines) == 1


def test_a_compile_of_the_step_is_said_and_kept_out_of_tokens_per_second(capsys, model_dir):
    """`--graphs on` on a CPU compiles the step with inductor: stderr says so with its time, and tokens/s is the
    sampling's alone (the record's seconds hold both)."""
    argv = ["sample", "--model", model_dir, "--num-samples", "2", "--length", "12", "--graphs", "on", "--seed", "9"]
    code, out, err = run_cli(capsys, [*argv, "--json", "--no-progress"])
    assert code == 0, err
    record = json.loads(out)
    assert re.search(r"compiled the decode step at shape \(1, 1\) with inductor in [\d.]+ s \(not counted", err), err
    assert "; on a CPU: compiled step, no CUDA graph)" in err  # what `on` runs here, said plainly
    assert 0 < record["compile_seconds"] < record["seconds"]
    sampling = record["seconds"] - record["compile_seconds"]
    assert record["tokens_per_second"] == pytest.approx(24 / sampling, rel=1e-3)
    code, _, err = run_cli(capsys, [*argv, "--no-progress"])
    assert code == 0 and "(sampling only; compiling the step took" in err.splitlines()[-1]


def test_the_help_says_what_graphs_on_runs_on_a_cpu(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    assert "on a CPU: compiled step, no CUDA graph" in " ".join(capsys.readouterr().out.split())


def test_without_length_and_steps_a_first_look_is_128_tokens_in_32_steps(capsys, tmp_path):
    """Reported: `aogpt sample --model M` drew all 256 positions in 256 steps (4 minutes on a CPU). The
    command's defaults are a first look, capped by the model (positions) and the prompt (tokens to generate);
    --speculative keeps one step per token; given values win."""
    path = tmp_path / "long"
    save_model(tiny_model("adaln", max_seq_len=160, dim=32, n_heads=2, n_layers=1), str(path))
    argv = ["sample", "--model", str(path), "--json", "--no-progress"]
    code, out, err = run_cli(capsys, argv)
    assert code == 0, err
    record = json.loads(out)
    assert record["length"] == 128 and record["steps"] == 32 and len(record["tokens"][0]) == 128
    code, out, _ = run_cli(capsys, [*argv, "--infill", json.dumps({"spans": [{"start": 0, "tokens": [1] * 110}]})])
    assert json.loads(out)["steps"] == 18  # 128 - 110 positions left: one step each
    code, out, _ = run_cli(capsys, [*argv, "--length", "40", "--steps", "40"])
    assert (json.loads(out)["length"], json.loads(out)["steps"]) == (40, 40)
    code, out, _ = run_cli(capsys, [*argv, "--length", "40", "--speculative", "2"])
    assert json.loads(out)["steps"] == 40
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    assert "default 128" in capsys.readouterr().out


def test_infill_output_marks_the_given_text(capsys, symbols_dir):
    """Reported: infill output did not show which text was given and which generated. --show-given on (auto in
    a terminal) wraps each given run in [[ ]]; off prints the plain text."""
    argv = ["sample", "--model", symbols_dir, "--length", "12", "--steps", "4", "--no-progress", "--seed", "3"]
    argv += ["--infill", json.dumps({"spans": [{"start": 0, "text": "5 6"}, {"start": 8, "tokens": [9]}]})]
    code, marked, err = run_cli(capsys, [*argv, "--show-given", "on"])
    assert code == 0, err
    code, plain, _ = run_cli(capsys, [*argv, "--show-given", "off"])
    text = marked.splitlines()[1]
    assert text.startswith("[[5 6]]") and text.count("[[") == 2 and "[[ 9]]" in text, text
    assert text.replace("[[", "").replace("]]", "") == plain.splitlines()[1]
