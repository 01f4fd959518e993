"""`aogpt bench requests`: many mixed requests sampled one at a time and in batches (not a test).

What an evaluation harness or an RL rollout does: hundreds of requests, each with its own prompt or
infill spans, length and seed, through the batched request path (`aogpt sample --requests`,
sampler/request.py's `sample_batches`). The requests are made up once, deterministically: a third
have a prompt (4 to n/4 tokens at position 0), a third two infill spans (2 to 6 tokens each at random
places), a third nothing; lengths between n/2 and n, request i seeded i, T = one step per generated
token. Each batch size samples all of them after an untimed warm-up: its first batch, or with a static
step (--graphs) a whole pass, so every step shape is compiled or captured (and FlexAttention compiled for
it) before the clock runs. --repeats R rounds time every batch size once, in turn, and tokens/s is the
median over the rounds. The ratio is a batch
size's tokens/s over one-at-a-time's, the median of the per-round ratios with their [min, max].
Random weights (a flavor) or a converted model; a compile of the static step is not counted.
Every batch size must give every request the same tokens (batch invariance): the result says so.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from ..devices import device_name, resolve_device, resolve_dtype
from ..errors import UserError
from ..model import FLAVORS
from ..sampler.options import BACKENDS, add_graphs_arg
from . import command_environment, median_and_range


def add_to(subparsers) -> None:
    p = subparsers.add_parser("requests", help="mixed requests (prompts, infill spans) one at a time vs in batches")
    p.add_argument("--flavor", default="tiny", help=f"model size, random weights: {', '.join(FLAVORS)} (default tiny)")
    p.add_argument("--model", default=None, metavar="MODEL_DIR", help="a converted model instead of --flavor")
    p.add_argument("--requests", type=int, default=256, metavar="R", help="mixed requests (default 256)")
    p.add_argument("--n", type=int, default=64, help="the longest request's tokens (default 64)")
    p.add_argument(
        "--batch-sizes",
        default="1,8,32",
        metavar="K,K,...",
        help="batch sizes, the first the reference (default 1,8,32)",
    )
    p.add_argument("--repeats", type=int, default=1, help="timed rounds of every batch size (default 1)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on cuda, else fp32)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="attention backend")
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: torch's choice)")
    add_graphs_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (scripts/update_benchmarks_doc.py)")
    p.set_defaults(run=run)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes) or len(set(sizes)) != len(sizes):
        raise UserError(f"--batch-sizes {text!r} is not allowed; allowed: distinct integers >= 1, e.g. 1,8,32")
    return sizes


def mixed_requests(count: int, n: int, vocab_size: int, seed: int = 0) -> list[dict]:
    """`count` request objects: a prompt, two infill spans or nothing, lengths n/2..n, request i seeded i."""
    import torch

    g = torch.Generator().manual_seed(seed)
    rand = lambda low, high: int(torch.randint(low, high + 1, (1,), generator=g))  # noqa: E731
    tokens = lambda k: torch.randint(0, vocab_size, (k,), generator=g).tolist()  # noqa: E731
    out = []
    for i in range(count):
        length = rand(max(2, n // 2), n)
        request = {"length": length, "seed": i}
        if i % 3 == 0:
            request["infill"] = [
                {"start": 0, "tokens": tokens(rand(min(4, length - 1), max(1, min(n // 4, length - 1))))}
            ]
        elif i % 3 == 1 and length >= 16:
            first, second = rand(2, 6), rand(2, 6)
            a = rand(0, length // 2 - first)
            b = rand(length // 2, length - second)
            request["infill"] = [{"start": a, "tokens": tokens(first)}, {"start": b, "tokens": tokens(second)}]
        out.append(request)
    return out


def run_bench(model, requests: list[dict], sizes: list[int], device, dtype, graphs: str, backend: str, repeats: int):
    """Tokens/s per batch size (medians over rounds), ratios to the first size, and whether every batch size
    gave every request the same tokens."""
    from ..sampler import RequestLine, SampleRequest, sample_batches
    from ..sampler.choices import resolve_choices

    lines = [RequestLine(i, None, r) for i, r in enumerate(requests)]
    base = SampleRequest(graphs=graphs, backend=backend)
    choices = resolve_choices(graphs, backend, "auto", device, dtype, model.model_args.head_dim)

    def plan(request):
        return request.plan(model.model_args, None, device, dtype)

    def sample_all(size: int, subset=None) -> tuple[float, int, dict]:
        seconds, generated, tokens = 0.0, 0, {}
        for group, samples in sample_batches(model, subset or lines, base, plan, str, size):
            result = samples.result
            seconds += result.seconds - result.compile_seconds
            for b, line in enumerate(group):
                tokens[line.index] = result.sample_tokens(b)
                generated += int(result.lengths[b] - result.given[b])
        return seconds, generated, tokens

    static = choices.static_step
    for size in sizes:  # untimed: allocator and kernels; with a static step, every shape it compiles or captures
        sample_all(size, lines if static else lines[:size])
    rounds, by_size = [], {}
    for r in range(repeats):
        per_round = {}
        for size in sizes:
            seconds, generated, tokens = sample_all(size)
            per_round[size] = generated / seconds
            by_size[size] = tokens
            _log(f"  round {r + 1}/{repeats}  batch {size:3d}: {seconds:8.2f} s, {per_round[size]:9.1f} tokens/s")
        rounds.append(per_round)
    reference = sizes[0]
    ratios, spread = {}, {}
    for size in sizes[1:]:
        ratios[str(size)], spread[str(size)] = median_and_range([r[size] / r[reference] for r in rounds])
    return {
        "requests": len(requests),
        "generated_tokens": sum(
            int(r["length"]) - sum(len(s["tokens"]) for s in r.get("infill", [])) for r in requests
        ),
        "batch_sizes": sizes,
        "tokens_per_second": {str(s): round(statistics.median(r[s] for r in rounds), 2) for s in sizes},
        "speedup_vs_first": ratios,
        "speedup_range": spread,
        "same_tokens_at_every_batch_size": all(by_size[s] == by_size[reference] for s in sizes),
        "graphs": choices.graphs,
        "backend": choices.backend,
        "decode_attention": choices.decode_setting,
        "repeats": repeats,
        "rounds": [{str(s): round(v, 2) for s, v in r.items()} for r in rounds],
    }


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args) -> int:
    import torch

    from ..model_dir import load_model_dir, read_config
    from .baselines import build_decoder

    sizes = parse_sizes(args.batch_sizes)
    if args.model is None and args.flavor not in FLAVORS:
        raise UserError(f"--flavor {args.flavor!r} is unknown; allowed: {', '.join(FLAVORS)}")
    positions = read_config(args.model).model_args.max_seq_len if args.model else FLAVORS[args.flavor].max_seq_len
    if not 16 <= args.n <= positions:
        raise UserError(f"--n {args.n} is outside 16..{positions} (the model's positions)")
    for flag, value in (("--requests", args.requests), ("--repeats", args.repeats), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value} must be >= 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    if args.model is not None:
        model = load_model_dir(args.model, device, dtype).model.eval().requires_grad_(False)
    else:
        model = build_decoder(args.flavor, "adaln", device, dtype)
    requests = mixed_requests(args.requests, args.n, model.model_args.vocab_size)
    what = args.model or args.flavor
    _log(
        f"bench requests: {what}, {args.requests} mixed requests up to n={args.n}, batches {sizes} on {device_name(device)}"
    )
    started = time.perf_counter()
    result = run_bench(model, requests, sizes, device, dtype, args.graphs, args.backend, args.repeats)
    argv = [f"--model {args.model}" if args.model else f"--flavor {args.flavor}", f"--requests {args.requests}"]
    argv += [f"--n {args.n}", f"--batch-sizes {args.batch_sizes}", f"--repeats {args.repeats}"]
    for flag, value, default in (
        ("--device", args.device, "auto"),
        ("--dtype", args.dtype, None),
        ("--backend", args.backend, "auto"),
        ("--graphs", args.graphs, "auto"),
        ("--threads", args.threads, None),
    ):
        if value != default:
            argv.append(f"{flag} {value}")
    result.update(
        command=command_environment() + "aogpt bench requests " + " ".join(argv + (["--json"] if args.json else [])),
        model=what,
        n=args.n,
        device=device_name(device),
        dtype=str(dtype).removeprefix("torch."),
        wall_seconds=round(time.perf_counter() - started, 1),
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{what}: {args.requests} mixed requests up to n={args.n} on {result['device']} (graphs {result['graphs']})")
    for size in sizes:
        ratio = f"  {result['speedup_vs_first'][str(size)]:.2f}x batch {sizes[0]}" if size != sizes[0] else ""
        print(f"  batch {size:3d}: {result['tokens_per_second'][str(size)]:10.1f} tokens/s{ratio}")
    print(f"  same tokens at every batch size: {result['same_tokens_at_every_batch_size']}")
    return 0
