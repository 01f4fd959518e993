"""Inject one fault into a running `aogpt serve` and print what a client (and the server) saw, one line each.

    python tests/helpers/serve_fault.py MODEL_DIR CASE

CASE: bad-json, unknown-field, bad-type, long-prompt, max-tokens, body-size, queue-full, no-key, disconnect,
nan-step, sigterm, second-signal. scripts/fault_table.py runs every case for docs/reliability.md; the tests
in tests/serve/ check the same faults one by one. The server runs on a free port of 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start(model_dir: str, *flags: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "serve", "--model", model_dir, "--port", str(port), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        try:
            if request(port, "GET", "/health")[0] in (200, 401):
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    data = response.read().decode()
    connection.close()
    return response.status, data, dict(response.getheaders())


def said(status: int, data: str, headers: dict | None = None) -> str:
    """`HTTP 400 (param max_tokens): message`, as the client reads it."""
    try:
        error = json.loads(data)["error"]
        text = error["message"] + (f" [param {error['param']}]" if error.get("param") else "")
    except (ValueError, KeyError, TypeError):
        text = data[:200]
    retry = f", Retry-After {headers['retry-after']}" if headers and "retry-after" in headers else ""
    return f"HTTP {status}{retry}: {text}"


def completion(port: int, body: dict, **headers) -> str:
    return said(*request(port, "POST", "/v1/completions", json.dumps(body).encode(), headers))


def metric(port: int, name: str) -> float:
    _, text, _ = request(port, "GET", "/metrics")
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def wait(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.02)


def long_request(port: int, seen: dict, n: int = 1, tokens: int = 400) -> threading.Thread:
    def post():
        try:
            seen["answer"] = completion(port, {"prompt": "1", "max_tokens": tokens, "n": n, "order": "l2r"})
        except OSError as e:
            seen["answer"] = f"connection closed ({type(e).__name__})"

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def stopped(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=120)
    return f"server: exit {proc.returncode}, `{err.strip().splitlines()[-1]}`"


def main() -> int:
    model_dir, case = sys.argv[1], sys.argv[2]
    flags = {"queue-full": ["--slots", "1", "--max-queue", "2"], "no-key": ["--api-key-file", "KEY"]}
    flags.update({"body-size": ["--max-body-bytes", "1024"], "max-tokens": ["--max-tokens", "16"]})
    flags.update({c: ["--slots", "1"] for c in ("disconnect", "sigterm", "second-signal")})
    with tempfile.TemporaryDirectory() as tmp:
        key_flags = flags.get(case, [])
        if case == "no-key":
            (Path(tmp) / "key").write_text("s3cret\n")
            key_flags = ["--api-key-file", str(Path(tmp) / "key")]
        if case == "nan-step":
            model_dir = broken_copy(model_dir, tmp)
        if case in ("queue-full", "disconnect", "sigterm", "second-signal"):
            model_dir = long_model(model_dir, tmp)
        proc, port = start(model_dir, *key_flags)
        try:
            print(f"seen: {run_case(case, proc, port)}")
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
    return 0


def broken_copy(model_dir: str, tmp: str) -> str:
    """The model with a huge target embedding at its last position (finite weights, non-finite logits there)."""
    import torch

    from aogpt_plugin.model_dir import load_model_dir, read_config, save_model

    model = load_model_dir(model_dir, torch.device("cpu"), torch.float32).model
    with torch.no_grad():
        model.target_embeddings.weight[-1] = 1e30
    out = str(Path(tmp) / "broken")
    save_model(model, out, tokenizer=read_config(model_dir).tokenizer)
    return out


def long_model(model_dir: str, tmp: str) -> str:
    """A model of 512 positions (random weights, the folder's tokenizer): a request of 400 tokens runs for
    seconds, long enough to leave, fill the queue or stop the server under it."""
    import torch

    from aogpt_plugin.model import AOGPT, AOGPTModelArgs
    from aogpt_plugin.model_dir import read_config, save_model

    config = read_config(model_dir)
    torch.manual_seed(0)
    model = AOGPT(
        AOGPTModelArgs(dim=32, n_layers=2, n_heads=4, max_seq_len=512, vocab_size=config.model_args.vocab_size)
    )
    model.init_weights()
    out = str(Path(tmp) / "long")
    save_model(model, out, tokenizer=config.tokenizer)
    return out


def run_case(case: str, proc: subprocess.Popen, port: int) -> str:
    if case == "bad-json":
        return said(*request(port, "POST", "/v1/completions", b'{"prompt": "The city", "max_tokens": '))
    if case == "unknown-field":
        return completion(port, {"prompt": "The city", "frequency_penalty": 0.5})
    if case == "bad-type":
        return completion(port, {"prompt": "The city", "max_tokens": "8"})
    if case == "long-prompt":
        return completion(port, {"prompt": "city " * 4000, "max_tokens": 4})
    if case == "max-tokens":
        return completion(port, {"prompt": "The city", "max_tokens": 17})
    if case == "body-size":
        return completion(port, {"prompt": "x" * 2000})
    if case == "no-key":
        return "; ".join(
            (completion(port, {"prompt": "The city"}), completion(port, {"prompt": "A"}, Authorization="Bearer nope"))
        )
    if case == "queue-full":
        seen: dict = {}
        long_request(port, seen, n=2)
        wait(lambda: metric(port, "aogpt_queue_depth") == 1)
        return completion(port, {"prompt": "The city", "max_tokens": 4, "n": 2})
    if case == "disconnect":
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = {"prompt": "1", "max_tokens": 400, "stream": True}
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        connection.getresponse().readline()
        steps = metric(port, "aogpt_steps_total")
        connection.close()
        started = time.monotonic()
        wait(lambda: metric(port, "aogpt_slots_busy") == 0)
        return (
            f"client gone: its slot free after {time.monotonic() - started:.2f} s and "
            f"{metric(port, 'aogpt_steps_total') - steps:.0f} more step(s) (of its 400)"
        )
    if case == "nan-step":
        seen: dict = {}
        _, models, _ = request(port, "GET", "/v1/models")
        thread = long_request(port, seen, tokens=json.loads(models)["data"][0]["max_model_len"] - 1)
        other = completion(port, {"prompt": "1", "max_tokens": 8})
        thread.join()
        after = completion(port, {"prompt": "1", "max_tokens": 8})
        return f"{seen['answer']}; beside it {other[:8]}, after it {after[:8]}"
    if case in ("sigterm", "second-signal"):
        seen: dict = {}
        thread = long_request(port, seen)
        wait(lambda: metric(port, "aogpt_slots_busy") == 1)
        proc.send_signal(signal.SIGTERM)
        wait(lambda: request(port, "GET", "/health")[0] == 503, 10)
        refused = completion(port, {"prompt": "The city"})
        if case == "second-signal":
            proc.send_signal(signal.SIGINT)
        thread.join()
        return f"in flight: {seen['answer'][:40]}; new: {refused}; {stopped(proc)}"
    raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    sys.exit(main())
