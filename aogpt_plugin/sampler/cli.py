"""`aogpt sample`: draw samples from a converted model folder (see aogpt_plugin/sampler/__init__.py).

Every argument is checked against config.json before the weights are read, so a bad value costs
one `error:` line (exit 2) and no loading time. The flags become a run through sampler/request.py,
the path the Python API (`aogpt_plugin.load(...).generate`) takes too. Progress goes to stderr;
stdout holds only the samples (text, or with --json one object that `aogpt eval genppl --samples`
also reads).

`--requests FILE.jsonl --out RESULTS.jsonl` samples one request a line (its own prompt or infill, seed,
length, order; sampler/requests_file.py) in `--batch-size` slots of the continuous-batching engine
(engine.py: a request joins as another leaves; `--speculative`: fixed batches of that size), the other
flags giving what a request leaves out, and writes the results in input order; a second run with the
same --out goes on where the first stopped.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from ..devices import add_runtime_args
from ..errors import UserError, flag_name
from ..orders import READ_ORDERS
from .options import BACKENDS, COUNTS, SCHEDULES, add_decode_attention_arg, add_graphs_arg

# `aogpt sample`'s defaults without --length/--steps: a first sample a newcomer waits seconds for on a CPU (the API
# and --requests keep the sampler's own: every position, one step per token)
FIRST_LOOK_LENGTH, FIRST_LOOK_STEPS = 128, 32


def add_to(subparsers) -> None:
    p = subparsers.add_parser("sample", help="generate text from a converted model (any order, KV cache)")
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="converted model folder (aogpt convert)")
    p.add_argument("--num-samples", type=int, default=None, metavar="B", help="samples in the batch (default 1)")
    p.add_argument(
        "--length",
        type=int,
        default=None,
        metavar="N",
        help=f"tokens per sample (default {FIRST_LOOK_LENGTH}, or the model's positions if fewer; with --requests: all "
        "positions)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="T",
        help=f"denoising steps, 1..N (default {FIRST_LOOK_STEPS}, or one per token to generate if fewer: a first look "
        "in seconds on a CPU; N for the exact sequential law; with --requests or --speculative: one per token)",
    )
    p.add_argument("--order", choices=READ_ORDERS, default="random", help="fill order (default random)")
    # --schedule/--counts default to None so that check_sampling_flags sees whether they were given
    p.add_argument("--schedule", choices=SCHEDULES, default=None, help="time grid (default linear)")
    p.add_argument(
        "--counts",
        choices=COUNTS,
        default=None,
        help="tokens per step: the authors' deterministic rule or Lemma 4.1's binomial draws",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="> 0 (default 1)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default 1 = off)")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens (default off)")
    p.add_argument("--prompt", default=None, metavar="TEXT", help="given text at position 0")
    p.add_argument(
        "--infill",
        default=None,
        metavar="JSON",
        help='given spans: \'{"spans": [{"start": 40, "text": "..."}, {"start": 90, "tokens": [464]}]}\' or @FILE',
    )
    p.add_argument(
        "--speculative",
        default=None,
        metavar="K|auto",
        help="exact any-order speculative sampling with K drafts per round, or auto (adapts K): the T=N "
        "distribution in fewer forward passes (excludes --steps/--schedule/--counts)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="0..2**64-1; sample 0 draws its order, counts and Gumbel noise from SEED, sample i from a mix of SEED "
        "and i: same seed, same samples, in any batch; other seeds, other samples",
    )
    p.add_argument(
        "--show-given",
        choices=("auto", "on", "off"),
        default="auto",
        help="mark the given text (--prompt, --infill) as [[given]] in the printed samples (auto: when stdout is a "
        "terminal; --json keeps the tokens and given_positions)",
    )
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="attention (auto: per device)")
    add_graphs_arg(p)
    add_decode_attention_arg(p)
    g = p.add_argument_group("many requests (one JSON object a line)")
    g.add_argument(
        "--requests",
        default=None,
        metavar="FILE.jsonl",
        help="sample one request a line: {'prompt' | 'infill', 'seed', 'length', 'order', 'steps', 'temperature', "
        "'top_p', 'top_k', 'schedule', 'counts'}; the flags above fill what a request leaves out (a request "
        "without a seed is seeded as sample INDEX of --seed)",
    )
    g.add_argument(
        "--out", default=None, metavar="RESULTS.jsonl", help="with --requests: one result a line, in input order; "
        "a run again with the same file keeps the results already there when they answer the same requests "
        "under the same options (else it stops, naming the first difference); one run writes a file at a time"
    )  # fmt: skip
    g.add_argument(
        "--batch-size",
        type=int,
        default=8,
        metavar="K",
        help="with --requests: requests sampled together, each joining as another ends (default 8)",
    )
    add_runtime_args(p)
    p.set_defaults(run=run)


def check_args(args, device, dtype):
    """(config, SamplePlan) from the command line and config.json alone, for weights of `dtype` on
    `device` -- no weights read."""
    from ..model_dir import read_config
    from .request import SampleRequest

    config = read_config(args.model)
    tokenizer = None

    def encode(text: str) -> list[int]:  # the tokenizer loads only when there is text to tokenize
        nonlocal tokenizer
        if tokenizer is None:
            tokenizer = config.build_tokenizer(args.model, check_vocab=False)
        return tokenizer.encode(text)

    request = SampleRequest.from_args(args)
    if request.length is None:
        request.length = min(FIRST_LOOK_LENGTH, config.model_args.max_seq_len)
    plan = request.plan(config.model_args, encode, device, dtype)
    if request.steps is None and not plan.speculative:  # at most one per token any sample generates
        request.steps = min(FIRST_LOOK_STEPS, plan.fewest_to_fill())
        plan = request.plan(config.model_args, encode, device, dtype)
    return config, plan


GIVEN_OPEN, GIVEN_CLOSE = "[[", "]]"


def marked_text(tokens: list[int], given: tuple[int, ...], decode) -> str:
    """A sample's text with each run of given positions in [[ ]], so what was given and what was generated can
    be told apart: each run is the text its tokens add to the decoded prefix before them (what a tokenizer puts
    between tokens stays where it was)."""
    given, out, start, before = set(given), [], 0, ""
    for end in range(1, len(tokens) + 1):
        if end == len(tokens) or (end in given) != (start in given):
            upto = decode(tokens[:end])
            text = upto[len(before) :] if upto.startswith(before) else decode(tokens[start:end])
            out.append(f"{GIVEN_OPEN}{text}{GIVEN_CLOSE}" if start in given else text)
            start, before = end, upto
    return "".join(out)


def check_fits(model_args, plan, device, dtype, flag: str = "--num-samples") -> None:
    """A batch that cannot fit in the device's free memory is refused before the weights load (it
    would otherwise swap for hours, or be killed after the work), naming the largest that fits."""
    from ..devices import available_memory, format_bytes
    from .generation import memory_per_sample

    free = available_memory(device)
    if free is None:
        return
    sample_config, itemsize = plan.config, dtype.itemsize
    weights = _parameter_bytes(model_args, itemsize)
    static = plan.choices.static_step
    per_sample = memory_per_sample(model_args, sample_config, plan.fewest_given(), itemsize, plan.draft, static)
    batch = sample_config.num_samples
    if weights + batch * per_sample <= free:
        return
    fits = max(0, (free - weights) // per_sample)
    raise UserError(
        f"{flag} {batch} needs about {format_bytes(weights + batch * per_sample)} of memory on {device.type} "
        f"and {format_bytes(free)} is free; allowed here: up to {fits} (draw more with several runs and seeds)"
    )


def _parameter_bytes(model_args, itemsize: int) -> int:
    """The model's weights, from its shapes (the loaded copy and the float32 file being read)."""
    a = model_args
    block = 4 * a.dim * a.dim + 3 * a.dim * a.dim * a.mlp_ratio + 6 * a.dim * a.target_pe_dim
    total = a.n_layers * block + 2 * a.padded_vocab_size * a.dim + (a.max_seq_len + 1) * (a.dim + a.target_pe_dim)
    return total * (itemsize + 4)


def run(args) -> int:
    from ..devices import device_name, resolve_device, resolve_dtype
    from ..model_dir import load_model_dir
    from .generation import samples_record
    from .request import run_plan

    _check_request_flags(args)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype)
    if args.requests is not None:
        return run_requests(args, device, dtype)
    config, plan = check_args(args, device, dtype)
    sample_config = plan.config
    check_fits(config.model_args, plan, device, dtype)
    model_dir = load_model_dir(args.model, device=device, dtype=dtype, verify=args.verify)
    tokenizer = model_dir.tokenizer(check_vocab=False)
    samples = run_plan(model_dir.model, plan, tokenizer.decode, progress=not args.no_progress)
    result, speculative, texts = samples.result, samples.speculative, samples.texts
    tokens = [result.sample_tokens(b) for b in range(sample_config.num_samples)]
    if args.json:
        out = samples_record(
            tokens,
            texts,
            tokenizer=tokenizer.name,
            model=args.model,
            length=sample_config.length,
            num_samples=sample_config.num_samples,
            given_positions=list(plan.prompt_of(0).positions),  # the same for every sample here
            steps=result.steps,
            forward_passes=result.forward_passes,
            seconds=round(result.seconds, 6),
            compile_seconds=round(result.compile_seconds, 6),  # within seconds; tokens/s leaves it out
            tokens_per_second=round(result.tokens_per_second, 3),
            order=sample_config.order,
            schedule=sample_config.schedule,
            counts=sample_config.counts,
            temperature=sample_config.sampling.temperature,
            top_p=sample_config.sampling.top_p,
            top_k=sample_config.sampling.top_k,
            seed=sample_config.seed,
            device=device_name(device),
            backend=args.backend,
            graphs=args.graphs,
            decode_attention=plan.choices.decode_setting,
            dtype=args.dtype,
            **speculative,
        )
        print(json.dumps(out))
        return 0
    marked = args.show_given == "on" or (args.show_given == "auto" and sys.stdout.isatty())
    for i, text in enumerate(texts):
        print(f"=== sample {i} ===")
        given = plan.prompt_of(i).positions
        print(marked_text(tokens[i], given, tokenizer.decode) if marked and given else text)
    sys.stdout.flush()  # an output that cannot be written (a closed pipe, a full disk) fails here, before the summary
    how = (
        f"speculative (draft {plan.draft}): {speculative['tokens_per_forward']:.2f} tokens per forward, "
        f"draft acceptance {speculative['draft_acceptance_rate']:.2f}, "
        if speculative
        else f"{result.steps} steps, "
    )
    print(
        f"{how}{result.forward_passes} forward passes, {result.tokens_per_second:.1f} tokens/s on {device_name(device)}"
        + (
            f" (sampling only; compiling the step took {result.compile_seconds:.1f} s more)"
            if result.compile_seconds
            else ""
        ),
        file=sys.stderr,
    )
    return 0


def _check_request_flags(args) -> None:
    """--requests and --out go together; the flags that give every sample its prompt or the batch its
    size do not apply with them (each request gives its own)."""
    from ..errors import check_writable, require_at_least

    if args.requests is None:
        for flag, value in (("--out", args.out), ("--batch-size", args.batch_size if args.batch_size != 8 else None)):
            if value is not None:
                raise UserError(f"{flag} applies with --requests FILE.jsonl (many requests); drop it or add --requests")
        return
    if args.out is None:
        raise UserError("--requests needs --out RESULTS.jsonl (where the results go, one line per request)")
    for flag, value in (("--num-samples", args.num_samples), ("--prompt", args.prompt), ("--infill", args.infill)):
        if value is not None:
            raise UserError(f"{flag} does not apply with --requests (each request gives its own); drop it")
    require_at_least("--batch-size", args.batch_size, 1, "the requests sampled together")
    check_writable(args.out, "--out", force=True)  # an existing file is the one to go on with


def run_requests(args, device, dtype) -> int:
    """`aogpt sample --requests FILE --out RESULTS`: every request checked (no weights), the ones not yet in
    RESULTS sampled in batches, each result written as soon as the ones before it are."""
    import time

    from tqdm import tqdm

    from ..devices import device_name, print_json
    from ..errors import Interrupted
    from ..model_dir import load_model_dir, read_config
    from . import Engine
    from .request import SampleRequest, check_requests, sample_batches, sample_in_slots, token_options
    from .requests_file import OrderedResults, made_from, read_requests

    config = read_config(args.model)
    tokenizer = None

    def encode(text: str) -> list[int]:
        nonlocal tokenizer
        if tokenizer is None:
            tokenizer = config.build_tokenizer(args.model, check_vocab=False)
        return tokenizer.encode(text)

    requests = read_requests(args.requests)
    base = SampleRequest.from_args(args, num_samples=None)

    def plan(request, spell=flag_name):
        return request.plan(config.model_args, encode, device, dtype, spell)

    check_requests(requests, base, plan, args.requests)
    longest = max(r.fields.get("length") or base.length or config.model_args.max_seq_len for r in requests)
    batch_plan = plan(SampleRequest.from_args(args, num_samples=args.batch_size, length=longest))
    check_fits(config.model_args, batch_plan, device, dtype, flag="--batch-size")
    model_id = {"model": config.model_sha256 or os.path.abspath(args.model), "dtype": args.dtype}
    max_positions = config.model_args.max_seq_len
    results = OrderedResults(
        args.out, [made_from(r, model_id | token_options(r, base, max_positions)) for r in requests]
    )
    todo = [r for r in requests if r.index not in results.done]
    if results.done:
        _say(
            f"{args.out}: {len(results.done)} of {len(requests)} results already there; sampling the other {len(todo)}"
        )
    model_dir = load_model_dir(args.model, device=device, dtype=dtype, verify=args.verify)
    decode = model_dir.tokenizer(check_vocab=False).decode
    bar = tqdm(total=len(requests), initial=len(results.done), unit="req", desc="requests", disable=args.no_progress)
    started, sampled, tokens, sampling_seconds, compile_seconds = time.perf_counter(), 0, 0, 0.0, 0.0

    def add(request, row: list[int], text: str, given: int) -> None:
        nonlocal sampled, tokens
        seed = request.seeded(base.seed)["seed"]
        results.add(request.index, {"text": text, "tokens": row, "seed": seed, "length": len(row)})
        tokens += len(row) - given
        sampled += 1
        bar.update(1)

    try:
        if batch_plan.speculative:  # its rounds: fixed batches (engine.py says why)
            for group, samples in sample_batches(model_dir.model, todo, base, plan, decode, args.batch_size):
                result = samples.result
                for b, request in enumerate(group):
                    add(request, result.sample_tokens(b), samples.texts[b], int(result.given[b]))
                sampling_seconds += result.seconds - result.compile_seconds
                compile_seconds += result.compile_seconds
                bar.set_postfix_str(f"{tokens / max(sampling_seconds, 1e-9):.1f} tokens/s")  # tqdm shows req/s
        else:  # continuous batching: --batch-size slots, a request joins as one leaves
            engine = Engine(model_dir.model, args.batch_size, batch_plan.choices)
            for request, sample in sample_in_slots(engine, todo, base, plan, args.requests):
                add(request, sample.tokens, decode(sample.tokens), sample.given)
                sampling_seconds = engine.seconds - engine.compile_seconds()
                bar.set_postfix_str(f"{tokens / max(sampling_seconds, 1e-9):.1f} tokens/s")  # tqdm shows req/s
            compile_seconds = engine.compile_seconds()
    except KeyboardInterrupt as e:
        detail = (
            f"{results.written} of {len(requests)} results are in {args.out!r}; the same command goes on from there"
        )
        raise Interrupted(getattr(e, "signum", signal.SIGINT), detail) from None
    finally:
        bar.close()
        results.close()
    elapsed = time.perf_counter() - started
    summary = {
        "requests": len(requests),
        "sampled": sampled,
        "already_done": len(requests) - len(todo),
        "generated_tokens": tokens,
        "seconds": round(elapsed, 3),
        "sampling_seconds": round(sampling_seconds, 3),
        "compile_seconds": round(compile_seconds, 3),
        "requests_per_second": round(sampled / max(elapsed, 1e-9), 3),
        "tokens_per_second": round(tokens / max(sampling_seconds, 1e-9), 3),
        "batch_size": args.batch_size,
        "graphs": batch_plan.choices.graphs,
        "decode_attention": batch_plan.choices.decode_setting,
        "device": device_name(device),
        "out": args.out,
    }
    _say(
        f"{sampled} requests sampled ({summary['already_done']} already in {args.out}) in {elapsed:.1f} s: "
        f"{summary['requests_per_second']} requests/s, {summary['tokens_per_second']} tokens/s"
        + (f" (compiling the step took {compile_seconds:.1f} s more)" if compile_seconds else "")
        + f" on {device_name(device)}"
    )
    if args.json:
        print_json(summary)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
