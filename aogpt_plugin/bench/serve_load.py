"""`aogpt bench serve`: `aogpt serve` under load, continuous batching against fixed batches (not a test).

A fixed set of mixed completion requests (prompts of 1 to n/4 tokens, max_tokens from 2 to 3n/4, a third
with a suffix, a sixth with infill spans inside the gap, request i seeded i) is sent at Poisson arrival times
(`--rate` per second, one schedule drawn once) by `--clients` concurrent clients, streaming, to two servers on
127.0.0.1 started from the same model folder with the same slots: `--batching continuous` and `--batching
fixed` (a batch of slots runs until its slowest sample ends). Each round sends the whole set to each, in
turn (the order alternates by round); per round and server: throughput (generated tokens over the round's
wall time), latency p50/p99 (request sent to its last event), time to first byte p50, slot occupancy (from
the server's /metrics: samples per step over slots). The result is the median [min, max] over rounds of each,
and of the per-round ratio continuous / fixed. Every response is checked equal to its offline result (the
same request sampled alone in this process): `same_as_offline`.

Random weights of a flavor (saved to a scratch folder with a symbols tokenizer: texts are token ids) or a
converted model. The servers run with OMP_NUM_THREADS=`--threads` (default 1); the clients are threads of
this process.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from ..errors import UserError
from ..model import FLAVORS
from ..sampler.options import add_graphs_arg
from . import median_and_range


def add_to(subparsers) -> None:
    p = subparsers.add_parser("serve", help="aogpt serve under load: continuous batching vs fixed batches")
    p.add_argument("--flavor", default="tiny", help=f"model size, random weights: {', '.join(FLAVORS)} (default tiny)")
    p.add_argument("--model", default=None, metavar="MODEL_DIR", help="a converted model instead of --flavor")
    p.add_argument("--requests", type=int, default=48, metavar="R", help="mixed requests per round (default 48)")
    p.add_argument("--n", type=int, default=64, help="the longest request's positions (default 64)")
    p.add_argument("--slots", type=int, default=8, help="the servers' slots (default 8)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--rate", type=float, default=50.0, help="Poisson arrivals per second (default 50)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each server once per round (default 3)")
    p.add_argument("--threads", type=int, default=1, help="the servers' intra-op threads (default 1)")
    p.add_argument("--device", default="cpu", help="the servers' device, and the offline results' (default cpu)")
    add_graphs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (scripts/update_benchmarks_doc.py)")
    p.set_defaults(run=run)


def mixed_completions(count: int, n: int, vocab_size: int, seed: int = 0) -> list[dict]:
    """`count` completion bodies: a prompt of 1..n/4 token ids, max_tokens 2..3n/4 (so the samples' lengths
    differ widely), a suffix (text of token ids: a symbols tokenizer) for every third where it fits, an infill
    span in the gap for every sixth, request i seeded i."""
    import torch

    g = torch.Generator().manual_seed(seed)
    rand = lambda low, high: int(torch.randint(low, high + 1, (1,), generator=g))  # noqa: E731
    tokens = lambda k: torch.randint(0, vocab_size, (k,), generator=g).tolist()  # noqa: E731
    out = []
    for i in range(count):
        prompt = tokens(rand(1, max(1, n // 4)))
        gap = rand(2, max(2, 3 * n // 4))
        body = {"prompt": prompt, "max_tokens": gap, "seed": i, "stream": True}
        room = n - len(prompt) - gap
        if i % 3 == 1 and room >= 1:
            body["suffix"] = " ".join(str(t) for t in tokens(rand(1, min(room, max(1, n // 8)))))
        if i % 6 == 0 and gap >= 6:
            body["infill"] = [{"start": len(prompt) + gap // 2, "tokens": tokens(2)}]
        out.append(body)
    return out


def offline_texts(model_dir: str, bodies: list[dict], device: str = "cpu", graphs: str = "auto") -> list[str]:
    """Each request's text sampled alone in this process (the server's own request checks and plans), on the
    servers' device with their graphs mode."""

    from ..devices import resolve_device, resolve_dtype
    from ..model_dir import load_model_dir
    from ..sampler import generate
    from ..serve.completions import Limits, cut_at_stop, parse_completion, plan_choices

    device = resolve_device(device)
    dtype = resolve_dtype("bfloat16" if device.type == "cuda" else "float32")
    loaded = load_model_dir(model_dir, device, dtype)
    model, tokenizer = loaded.model, loaded.tokenizer(check_vocab=False)
    args = model.model_args
    limits = Limits(max_tokens=args.max_seq_len, max_n=1)
    texts = []
    for body in bodies:
        completion = parse_completion(
            {k: v for k, v in body.items() if k != "stream"}, model_name="m", positions=args.max_seq_len,
            vocab_size=args.vocab_size, encode=tokenizer.encode, limits=limits,
        )  # fmt: skip
        plan_choices(
            completion, lambda r, spell: _with_graphs(r, graphs).plan(args, tokenizer.encode, device, dtype, spell)
        )
        (choice,) = completion.choices
        plan = choice.plan
        result = generate(model, plan.config, plan.prompts, order=plan.order, choices=plan.choices)
        gap = result.sample_tokens(0)[len(choice.prompt) : len(choice.prompt) + choice.gap]
        texts.append(cut_at_stop(tokenizer.decode(gap), completion.stop)[0])
    return texts


def _with_graphs(request, graphs: str):
    request.graphs = graphs
    return request


def _metrics(port: int) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("aogpt_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _stream(port: int, body: dict) -> tuple[str, float, float]:
    """(text, seconds to the first byte, seconds to the end) of one streamed completion."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    first = None
    text = []
    while True:
        line = response.readline()
        if first is None:
            first = time.perf_counter() - started
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(f"the server answered an error: {event['error']['message']}")
        text.append(event["choices"][0]["text"])
    connection.close()
    return "".join(text), first, time.perf_counter() - started


def load_round(port: int, bodies: list[dict], arrivals: list[float], clients: int) -> dict:
    """Send every body at its arrival time (seconds from the start), at most `clients` at once."""
    texts, ttfb, latency = [None] * len(bodies), [0.0] * len(bodies), [0.0] * len(bodies)
    lock, next_index = threading.Lock(), [0]
    before = _metrics(port)
    start = time.perf_counter()

    def client():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(bodies):
                return
            delay = start + arrivals[i] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            texts[i], ttfb[i], latency[i] = _stream(port, bodies[i])

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    after = _metrics(port)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    steps = max(delta.get("aogpt_steps_total", 0.0), 1.0)
    generated = delta.get("aogpt_generated_tokens_total", 0.0)
    return {
        "texts": texts,
        "tokens_per_second": generated / wall,
        "latency_p50": _percentile(latency, 50),
        "latency_p99": _percentile(latency, 99),
        "ttfb_p50": _percentile(ttfb, 50),
        "occupancy": delta.get("aogpt_busy_slot_steps_total", 0.0) / (steps * after["aogpt_slots"]),
        "seconds": wall,
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def _start_server(model_dir: str, batching: str, slots: int, threads: int, device: str, graphs: str):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "aogpt_plugin.cli", "serve", "--model", model_dir, "--port", str(port)]
    cmd += ["--slots", str(slots), "--batching", batching, "--max-queue", "100000", "--device", device]
    cmd += ["--graphs", graphs]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"aogpt serve --batching {batching} exited: {proc.stderr.read()[-500:]}")
        try:
            _metrics(port)
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise UserError(f"aogpt serve --batching {batching} did not start within 300 s")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args) -> int:
    import random

    import torch

    from ..devices import device_name, resolve_device
    from ..model_dir import read_config, save_model
    from .baselines import build_decoder

    for flag, value in (("--requests", args.requests), ("--slots", args.slots), ("--clients", args.clients)):
        if value < 1:
            raise UserError(f"{flag} {value} must be >= 1")
    if args.rounds < 1 or args.rate <= 0 or args.threads < 1:
        raise UserError("--rounds and --threads must be >= 1 and --rate > 0")
    if args.model is None and args.flavor not in FLAVORS:
        raise UserError(f"--flavor {args.flavor!r} is unknown; allowed: {', '.join(FLAVORS)}")
    scratch = None
    if args.model is None:
        scratch = tempfile.mkdtemp(prefix="aogpt-bench-serve-")
        model_dir = os.path.join(scratch, args.flavor)
        model = build_decoder(args.flavor, "adaln", torch.device("cpu"), torch.float32)
        save_model(model, model_dir, tokenizer=f"symbols:{model.model_args.vocab_size}")
    else:
        model_dir = args.model
    config = read_config(model_dir)
    if not 8 <= args.n <= config.model_args.max_seq_len:
        raise UserError(f"--n {args.n} is outside 8..{config.model_args.max_seq_len} (the model's positions)")
    bodies = mixed_completions(args.requests, args.n, config.model_args.vocab_size)
    rng = random.Random(0)
    arrivals, t = [], 0.0
    for _ in bodies:
        t += rng.expovariate(args.rate)
        arrivals.append(t)
    _log(f"bench serve: {args.requests} mixed requests up to n={args.n}, {args.clients} clients at {args.rate}/s")
    expected = offline_texts(model_dir, bodies, args.device, args.graphs)
    servers = {
        b: _start_server(model_dir, b, args.slots, args.threads, args.device, args.graphs)
        for b in ("continuous", "fixed")
    }
    started = time.perf_counter()
    rounds, same = [], True
    try:
        for b in servers:  # warm-up: one request each
            _stream(servers[b][1], {**bodies[0]})
        for r in range(args.rounds):
            order = ("continuous", "fixed") if r % 2 == 0 else ("fixed", "continuous")
            per_round = {}
            for batching in order:
                result = load_round(servers[batching][1], bodies, arrivals, args.clients)
                same = same and result.pop("texts") == expected
                per_round[batching] = result
                _log(
                    f"  round {r + 1}/{args.rounds} {batching:10s}: {result['tokens_per_second']:8.1f} tokens/s, "
                    f"p50 {result['latency_p50']:.2f} s, p99 {result['latency_p99']:.2f} s, "
                    f"occupancy {result['occupancy']:.2f}"
                )
            rounds.append(per_round)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(60)
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    summary = {}
    for batching in ("continuous", "fixed"):
        summary[batching] = {
            key: dict(zip(("median", "range"), median_and_range([r[batching][key] for r in rounds]), strict=True))
            for key in ("tokens_per_second", "latency_p50", "latency_p99", "ttfb_p50", "occupancy")
        }
    ratio = median_and_range([r["continuous"]["tokens_per_second"] / r["fixed"]["tokens_per_second"] for r in rounds])
    p99 = median_and_range([r["continuous"]["latency_p99"] / r["fixed"]["latency_p99"] for r in rounds])
    argv = [f"--model {args.model}" if args.model else f"--flavor {args.flavor}", f"--requests {args.requests}"]
    argv += [f"--n {args.n}", f"--slots {args.slots}", f"--clients {args.clients}", f"--rate {args.rate:g}"]
    argv += [f"--rounds {args.rounds}"] + ([f"--threads {args.threads}"] if args.threads != 1 else [])
    argv += [
        f"--{k} {v}"
        for k, v, default in (("device", args.device, "cpu"), ("graphs", args.graphs, "auto"))
        if v != default
    ]
    out = {
        "command": "aogpt bench serve " + " ".join(argv + (["--json"] if args.json else [])),
        "model": args.model or args.flavor,
        "device": device_name(resolve_device(args.device)),
        "slots": args.slots,
        "requests": args.requests,
        "generated_tokens": sum(b["max_tokens"] - sum(len(s["tokens"]) for s in b.get("infill", [])) for b in bodies),
        "continuous": summary["continuous"],
        "fixed": summary["fixed"],
        "tokens_per_second_ratio": ratio[0],
        "tokens_per_second_ratio_range": ratio[1],
        "latency_p99_ratio": p99[0],
        "latency_p99_ratio_range": p99[1],
        "same_as_offline": same,
        "rounds": [{b: {k: round(v, 4) for k, v in r[b].items()} for b in r} for r in rounds],
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(out))
        return 0
    for batching in ("continuous", "fixed"):
        s = summary[batching]
        print(
            f"{batching:10s}: {s['tokens_per_second']['median']:8.1f} tokens/s {s['tokens_per_second']['range']}, "
            f"latency p50 {s['latency_p50']['median']:.2f} s p99 {s['latency_p99']['median']:.2f} s, "
            f"ttfb p50 {s['ttfb_p50']['median']:.3f} s, occupancy {s['occupancy']['median']:.2f}"
        )
    print(f"continuous / fixed tokens/s: {ratio[0]:.2f}x {ratio[1]}; p99 latency {p99[0]:.2f}x {p99[1]}")
    print(f"every response equal to its offline result: {same}")
    return 0
