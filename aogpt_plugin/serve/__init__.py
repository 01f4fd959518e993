"""`aogpt serve --model MODEL_DIR`: an OpenAI-compatible completions server over the continuous-batching engine.

    aogpt serve --model outputs/aogpt_debug_model --port 8000 &
    curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "The city", "suffix": " the river.", "max_tokens": 8, "seed": 0}'

The server imports the sampler, never the reverse: sampler/engine.py holds the slots and runs the steps (no
HTTP in it), worker.py runs the engine on a thread of its own, app.py is the HTTP side (routes, limits,
errors, streaming), completions.py turns a request body into sample plans and samples into answers. It binds
127.0.0.1 unless --host says otherwise; with --api-key-file (or AOGPT_API_KEY) every route but /health needs
`Authorization: Bearer KEY`. Every limit is a flag with a default. SIGTERM or Ctrl-C stops accepting (503),
finishes the requests in flight within --drain-seconds (then cuts them: 503) and exits 0 with one line; a
second signal exits at once. Needs the `serve` extra: pip install -e '.[serve]' (`make setup` installs it).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ..errors import SIGNAL_NAMES, UserError, require_at_least

API_KEY_ENV = "AOGPT_API_KEY"


def add_to(subparsers) -> None:
    from ..devices import add_verify_arg
    from ..sampler.options import BACKENDS, BATCHING, add_decode_attention_arg, add_graphs_arg

    p = subparsers.add_parser("serve", help="an OpenAI-compatible completions server (continuous batching, infill)")
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="converted model folder (aogpt convert)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--name", default=None, help="the model's name in the API (default: the folder's name)")
    p.add_argument("--slots", type=int, default=8, metavar="K", help="samples sampled together (default 8)")
    p.add_argument(
        "--batching",
        choices=BATCHING,
        default="continuous",
        help="continuous: a sample joins as another leaves (default); fixed: a batch runs until its slowest ends",
    )
    p.add_argument("--api-key-file", default=None, metavar="FILE", help=f"require this key (or ${API_KEY_ENV})")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N", help="most max_tokens (default: positions)")
    p.add_argument("--max-n", type=int, default=16, metavar="N", help="most choices per request (default 16)")
    p.add_argument("--max-queue", type=int, default=256, metavar="N", help="most samples waiting (default 256)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, metavar="B", help="largest body (default 1 MiB)")
    p.add_argument("--drain-seconds", type=float, default=30.0, metavar="S", help="after SIGTERM/Ctrl-C (default 30)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="attention (auto: per device)")
    add_graphs_arg(p)
    add_decode_attention_arg(p)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on cuda, else fp32)")
    add_verify_arg(p)
    p.set_defaults(run=run)


def _api_key(path: str | None) -> str | None:
    if path is None:
        return os.environ.get(API_KEY_ENV) or None
    try:
        with open(path, encoding="utf-8") as f:
            key = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-key-file {path!r} cannot be read ({type(e).__name__})") from None
    if not key:
        raise UserError(f"--api-key-file {path!r} is empty; write the key in it")
    return key


def run(args) -> int:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise UserError(
            f"`aogpt serve` needs the serve extra ({e.name} is missing): pip install -e '.[serve]'"
        ) from None
    import torch

    from ..devices import device_name, resolve_device, resolve_dtype
    from ..model_dir import load_model_dir, read_config
    from ..sampler import Engine
    from ..sampler.choices import resolve_choices
    from .app import ServerState, build_app
    from .completions import Limits
    from .metrics import Metrics
    from .worker import Worker

    for flag, value in (("--slots", args.slots), ("--max-n", args.max_n), ("--max-queue", args.max_queue)):
        require_at_least(flag, value, 1, "a limit of the server")
    require_at_least("--max-body-bytes", args.max_body_bytes, 64, "the largest request body")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is outside 0..65535")
    if args.drain_seconds < 0:
        raise UserError(f"--drain-seconds {args.drain_seconds} must be >= 0")
    key = _api_key(args.api_key_file)
    config = read_config(args.model)
    positions = config.model_args.max_seq_len
    max_tokens = positions if args.max_tokens is None else args.max_tokens
    if not 1 <= max_tokens <= positions:
        raise UserError(f"--max-tokens {max_tokens} is outside 1..{positions} (the model's positions)")
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    choices = resolve_choices(
        args.graphs, args.backend, "auto", device, dtype, config.model_args.head_dim, args.decode_attention
    )
    model_dir = load_model_dir(args.model, device=device, dtype=dtype, verify=args.verify)
    model = model_dir.model
    tokenizer = model_dir.tokenizer(check_vocab=False)
    name = args.name or os.path.basename(os.path.normpath(args.model))

    def plan(request, spell):
        request.graphs, request.backend, request.decode_attention = args.graphs, args.backend, args.decode_attention
        return request.plan(config.model_args, tokenizer.encode, device, dtype, spell)

    metrics = Metrics(args.slots)
    worker = Worker(Engine(model, args.slots, choices, args.batching), metrics)
    limits = Limits(max_tokens=max_tokens, max_n=args.max_n)
    state = ServerState(worker, metrics, model, tokenizer, name, plan, limits, args.max_body_bytes, args.max_queue, key)
    app = build_app(state)
    server = _draining_server_class(uvicorn)(
        uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off"),
        state,
        args.drain_seconds,
    )
    server.ready_line = (
        f"aogpt serve: {name} on http://{args.host}:{{port}} ({args.slots} slots, {args.batching} batching, "
        f"graphs {choices.graphs}, {device_name(device)}){' with an API key' if key else ''}"
    )
    worker.start()
    torch.set_grad_enabled(False)
    try:
        server.run()
    finally:
        worker.stop()
    if server.stopped_by is not None:
        print(server.stopped_line(), file=sys.stderr, flush=True)
    return 0


def _draining_server_class(uvicorn):
    """uvicorn's server with aogpt's stop (made when uvicorn is imported: it is an optional extra)."""

    class DrainingServer(uvicorn.Server):
        """The first SIGTERM or Ctrl-C starts a drain (new requests get 503, those in flight go on until
        --drain-seconds, then are cut with 503), a second one exits at once."""

        def __init__(self, config, state, drain_seconds: float):
            super().__init__(config)
            self.state, self.drain_seconds = state, drain_seconds
            self.stopped_by: int | None = None
            self.deadline = 0.0
            self.in_flight_at_signal = 0
            self.ready_line = ""

        def capture_signals(self):
            import contextlib

            @contextlib.contextmanager
            def captured():
                previous = {signum: signal.signal(signum, self._on_signal) for signum in SIGNAL_NAMES}
                try:
                    yield
                finally:
                    for signum, handler in previous.items():
                        signal.signal(signum, handler)

            return captured()

        def _on_signal(self, signum, frame) -> None:
            if self.stopped_by is not None:  # the second: at once
                line = (
                    f"stopped by {SIGNAL_NAMES.get(signum, signum)} while draining; "
                    f"{self.state.in_flight} requests in flight were cut"
                )
                os.write(2, (line + "\n").encode())
                os._exit(128 + signum)
            self.stopped_by, self.in_flight_at_signal = signum, self.state.in_flight
            self.deadline = time.monotonic() + self.drain_seconds
            self.state.draining = True

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
                print(self.ready_line.format(port=port), file=sys.stderr, flush=True)

        async def on_tick(self, counter: int) -> bool:
            should_exit = await super().on_tick(counter)
            if self.stopped_by is None:
                return should_exit
            if self.state.in_flight and time.monotonic() >= self.deadline:
                for run in list(self.state.runs):
                    run.cut()
                self.deadline = float("inf")  # cut once; the answers go out, then the loop ends
            return self.state.in_flight == 0 or should_exit

        def stopped_line(self) -> str:
            finished = self.in_flight_at_signal - self.state.cut
            how = f"{finished} request(s) in flight finished" + (
                f", {self.state.cut} cut at --drain-seconds {self.drain_seconds:g}" if self.state.cut else ""
            )
            return f"aogpt serve: stopped by {SIGNAL_NAMES.get(self.stopped_by, self.stopped_by)}; {how}"

    return DrainingServer
