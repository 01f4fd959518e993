"""Fixtures of the server tests: `aogpt serve` started as a real process on a free port of 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import ROOT

pytest.importorskip("fastapi")


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """One intra-op thread here as in the servers (OMP_NUM_THREADS=1): the offline numbers are the server's."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `aogpt serve` process: its base URL, its log, and its end."""

    def __init__(self, model_dir: str, *flags: str, env: dict | None = None, key: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key
        cmd = [
            sys.executable,
            "-m",
            "aogpt_plugin.cli",
            "serve",
            "--model",
            model_dir,
            "--port",
            str(self.port),
            *flags,
        ]
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"aogpt serve exited {self.proc.returncode}: {self.proc.stderr.read()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise AssertionError("aogpt serve did not answer /health within 120 s")

    def post(self, path: str, body, headers: dict | None = None, raw: bytes | None = None) -> tuple[int, dict, dict]:
        """(status, JSON body, headers) of a POST (`raw`: these bytes as the body)."""
        data = raw if raw is not None else json.dumps(body).encode()
        heads = {"Content-Type": "application/json", **self._auth(), **(headers or {})}
        request = urllib.request.Request(self.url + path, data=data, headers=heads, method="POST")
        return self._open(request)

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict | str, dict]:
        request = urllib.request.Request(self.url + path, headers={**self._auth(), **(headers or {})})
        return self._open(request)

    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    @staticmethod
    def _open(request) -> tuple[int, dict | str, dict]:
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                status, text, headers = r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
        except urllib.error.HTTPError as e:
            status, text, headers = e.code, e.read().decode(), {k.lower(): v for k, v in e.headers.items()}
        try:
            return status, json.loads(text), headers
        except ValueError:
            return status, text, headers

    def metric(self, name: str) -> float:
        _, text, _ = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self, sig: int | None = signal.SIGTERM, timeout: float = 60) -> tuple[int, str]:
        """Send `sig` (None: none, it is ending by itself), wait; (exit status, stderr)."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def symbols_dir(tmp_path_factory) -> str:
    """A model whose tokenizer reads text as integers (symbols:61), 48 positions."""
    from conftest import tiny_model

    from aogpt_plugin.model_dir import save_model

    path = tmp_path_factory.mktemp("serve") / "tiny"
    save_model(tiny_model("adaln", max_seq_len=48, preset="sampler"), str(path), tokenizer="symbols:61")
    return str(path)


@pytest.fixture(scope="module")
def offline(symbols_dir):
    """The same folder through the Python API: what a request sampled alone gives."""
    import aogpt_plugin

    return aogpt_plugin.load(symbols_dir)
