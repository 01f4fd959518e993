"""`aogpt sample`: draw samples from a converted model folder (see aogpt_plugin/sampler/__init__.py).

Every argument is checked against config.json before the weights are read, so a bad value costs
one `error:` line (exit 2) and no loading time. The flags become a run through sampler/request.py,
the path the Python API (`aogpt_plugin.load(...).generate`) takes too. Progress goes to stderr;
stdout holds only the samples (text, or with --json one object that `aogpt eval genppl --samples`
also reads).
"""

from __future__ import annotations

import json
import sys

from ..devices import add_runtime_args
from ..errors import UserError
from ..orders import READ_ORDERS
from .options import BACKENDS, COUNTS, SCHEDULES, add_graphs_arg


def add_to(subparsers) -> None:
    p = subparsers.add_parser("sample", help="generate text from a converted model (any order, KV cache)")
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="converted model folder (aogpt convert)")
    p.add_argument("--num-samples", type=int, default=1, metavar="B", help="samples in the batch (default 1)")
    p.add_argument("--length", type=int, default=None, metavar="N", help="tokens per sample (default: all positions)")
    p.add_argument("--steps", type=int, default=None, metavar="T", help="denoising steps, 1..N (default N)")
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
        help="sample i draws its order, counts and Gumbel noise from seed SEED + i: same seed, same samples, in any batch",
    )
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="attention (auto: per device)")
    add_graphs_arg(p)
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

    return config, SampleRequest.from_args(args).plan(config.model_args, encode, device, dtype)


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
    static = plan.choices.graphs != "off"
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

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype)
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
            dtype=args.dtype,
            **speculative,
        )
        print(json.dumps(out))
        return 0
    for i, text in enumerate(texts):
        print(f"=== sample {i} ===")
        print(text)
    how = (
        f"speculative (draft {plan.draft}): {speculative['tokens_per_forward']:.2f} tokens per forward, "
        f"draft acceptance {speculative['draft_acceptance_rate']:.2f}, "
        if speculative
        else f"{result.steps} steps, "
    )
    print(
        f"{how}{result.forward_passes} forward passes, {result.tokens_per_second:.1f} tokens/s on {device_name(device)}",
        file=sys.stderr,
    )
    return 0
