"""`aogpt eval genppl`: generation perplexity of samples under a causal scorer, plus unigram entropy."""

from __future__ import annotations

import json
import sys
import time

from ..devices import Reporter, add_runtime_args, print_json, resolve_device, resolve_dtype
from ..errors import UserError, check_writable, require_at_least
from ..orders import READ_ORDERS
from ..sampler.options import add_graphs_arg
from ..seeding import sample_seed
from ..temporaries import write_file
from .samples import TOKEN_MODES


def add_to(subparsers) -> None:
    p = subparsers.add_parser("genppl", help="generation perplexity of samples under a causal scorer")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", metavar="FILE", help="samples: sampler --json output, JSON/JSON lines, or text")
    source.add_argument(
        "--model", metavar="MODEL_DIR", help="sample from this converted model first (needs the sampler)"
    )
    p.add_argument("--scorer", required=True, help="converted aogpt model folder (read left to right) or hf:NAME")
    p.add_argument(
        "--tokens",
        choices=TOKEN_MODES,
        default="auto",
        help="score the samples' token ids (direct), re-encode their text (retokenize), or direct when possible",
    )
    p.add_argument("--batch-size", type=int, default=8, help="samples per scorer forward (and per sampler call)")
    g = p.add_argument_group("sampling (with --model)")
    g.add_argument("--num-samples", type=int, default=None, metavar="N", help="samples to draw (required with --model)")
    g.add_argument("--length", type=int, default=None, help="tokens per sample (default: the model's positions)")
    g.add_argument("--steps", type=int, default=None, metavar="T", help="sampling steps (default: --length)")
    g.add_argument(
        "--speculative", default=None, metavar="K|auto", help="exact speculative sampling of the T=length distribution"
    )
    g.add_argument("--sample-order", choices=READ_ORDERS, default="random", help="generation order")
    g.add_argument("--temperature", type=float, default=1.0, help="softmax temperature of the sampler (default 1)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus mass kept per draw (default 1: off)")
    g.add_argument("--top-k", type=int, default=None, help="most likely tokens kept per draw (default: all)")
    g.add_argument("--seed", type=int, default=0, help="sampler seed: sample i is seeded SEED + i, in any batch")
    g.add_argument("--save-samples", metavar="FILE", default=None, help="also write the samples (sampler --json form)")
    add_graphs_arg(g)
    g.add_argument("--force", action="store_true", help="replace an existing --save-samples FILE")
    add_runtime_args(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from .genppl import nll_per_sample, prepare, summarize
    from .samples import read_samples
    from .scorers import check_scorer_arg, load_scorer

    started = time.perf_counter()
    say = Reporter(args.json)
    require_at_least("--batch-size", args.batch_size, 1, "the batch size")
    _check_sampling_args(args)
    check_scorer_arg(args.scorer)
    device = resolve_device(args.device)
    if args.model is not None:
        sample_set = sample_from_model(args, device, say)
    else:
        sample_set = read_samples(args.samples)

    scorer = load_scorer(args.scorer, device, resolve_dtype(args.dtype), verify=args.verify)
    prepared = prepare(sample_set, scorer, args.tokens)
    say(
        f"samples {sample_set.path}: {len(prepared.ids)} samples ({sample_set.tokenizer} tokens); scorer {scorer.name} "
        f"({scorer.kind}{', ' + scorer.weights + ' weights' if scorer.weights else ''}), ids {prepared.mode}, "
        + (
            "all tokens scored (the first with no context, from the model's start slot)"
            if scorer.kind == "aogpt"
            else "the first token of each not scored (no start token)"
        )
    )
    sums, counts = nll_per_sample(scorer, prepared.ids, args.batch_size, not args.no_progress and sys.stderr.isatty())
    summary = summarize(sums, counts, prepared.own_tokens)
    seconds = time.perf_counter() - started
    std = summary["sample_ppl_std"]
    say(
        f"gen ppl (mean of per-sample ppl) {summary['sample_ppl_mean']:.4f}"
        + (f" ± {std:.4f} (std over samples)" if std is not None else "")
    )
    say(f"token-level ppl {summary['ppl']:.4f}  nll {summary['nll']:.5f} nats/token over {summary['tokens']:,} tokens")
    say(f"unigram entropy {summary['unigram_entropy_mean']:.4f} nats (mean over samples)")
    say(f"time {seconds:.1f} s")
    if args.json:
        record = {
            "command": "genppl",
            "samples_file": sample_set.path,
            "samples_meta": sample_set.meta,
            "samples_tokenizer": sample_set.tokenizer,
            "scorer": scorer.name,
            "scorer_kind": scorer.kind,
            "weights": scorer.weights,
            "token_ids": prepared.mode,
            "dtype": args.dtype,
            "device": str(device),
            **summary,
            "seconds": round(seconds, 3),
        }
        print_json(record)
    return 0


def _check_sampling_args(args) -> None:
    if args.model is None:
        given = [
            f
            for f, v in (
                ("--num-samples", args.num_samples),
                ("--save-samples", args.save_samples),
                ("--speculative", args.speculative),
            )  # fmt: skip
            if v
        ]
        if given:
            raise UserError(f"{given[0]} needs --model (it draws samples); with --samples FILE drop it")
        return
    if args.num_samples is None:
        raise UserError("--model needs --num-samples N (how many samples to draw)")
    from ..sampler.speculative import check_sampling_flags

    args.speculative = check_sampling_flags(args.speculative, args.steps, distribution="the T=length distribution")
    if args.save_samples:
        check_writable(args.save_samples, "--save-samples", args.force)
    require_at_least("--num-samples", args.num_samples, 1, "the number of samples")
    require_at_least("--length", args.length, 1, "the sample length")
    require_at_least("--steps", args.steps, 1, "the number of steps")


def sample_from_model(args, device, say):
    """Draw --num-samples samples with aogpt_plugin.sampler, --batch-size at a time, sample i seeded as sample i of --seed (seeding.sample_seed)
    (so the samples do not depend on the batch size), through the sampler's one request path
    (sampler/request.py), checked before the weights load."""
    import dataclasses

    from ..model_dir import load_model_dir, read_config
    from ..sampler import samples_record
    from ..sampler.request import SampleRequest, run_plan
    from .samples import Sample, SampleSet

    request = SampleRequest.from_args(
        args, renamed={"order": "sample_order"}, num_samples=min(args.batch_size, args.num_samples)
    )
    dtype = resolve_dtype(args.dtype)
    model_args = read_config(args.model).model_args
    plan = request.plan(model_args, None, device, dtype)  # no prompt: nothing to tokenize
    model_dir = load_model_dir(args.model, device, dtype, verify=args.verify)
    tokenizer = model_dir.tokenizer(check_vocab=False)
    settings = {
        "model": args.model,
        "weights": model_dir.config.weights,
        "step": model_dir.config.step,
        "length": plan.config.length,
        "steps": plan.config.length if plan.config.steps is None else plan.config.steps,
        "order": args.sample_order,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "speculative": args.speculative,
        "graphs": args.graphs,
    }
    say(f"sampling {args.num_samples} samples from {args.model}: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    samples, forwards = [], 0
    for start in range(0, args.num_samples, args.batch_size):
        seeds = [sample_seed(args.seed, i) for i in range(start, min(start + args.batch_size, args.num_samples))]
        batch = dataclasses.replace(request, num_samples=len(seeds), seed=seeds)
        drawn = run_plan(model_dir.model, batch.plan(model_args, None, device, dtype), tokenizer.decode)
        forwards += drawn.result.forward_passes
        samples += [Sample(tokens=drawn.result.sample_tokens(b), text=text) for b, text in enumerate(drawn.texts)]
    del model_dir
    settings["forward_passes"] = forwards  # over all batches
    if args.save_samples:
        record = samples_record(
            [s.tokens for s in samples], [s.text for s in samples], tokenizer=tokenizer.name, **settings
        )
        check_writable(args.save_samples, "--save-samples", args.force)  # again: it may have appeared meanwhile
        write_file(
            args.save_samples, (json.dumps(record) + "\n").encode("utf-8"), f"--save-samples {args.save_samples!r}"
        )
    return SampleSet(samples, f"model:{args.model}", tokenizer.name, settings)
