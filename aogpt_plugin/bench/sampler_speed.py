"""`aogpt bench sampler`: AO sampler vs encoder-only MDM vs AR decode, timed in one run (not a test).

All three use random weights of one flavor (timing of a fixed step count does not depend on the weights):
  ao       - AO-GPT (adaLN) with the cached any-order sampler, T in {n, n/4, n/16}
  encoder  - the bidirectional MDM of the same width/depth: T full-sequence forwards, same T values. Each
             forward is the same work at every T (its head alone follows the step's rows: 0.5% of the
             FLOPs at `small`, n=1024), so a round times the first ENCODER_TIMED_FORWARDS forwards of a
             T=n run and its seconds at T are that per forward x T's forwards (T=n's forward is the
             cheapest: the ratios at T < n lean, by that 0.5%, against AO)
  ar       - a plain causal GPT of the same backbone (conditioning=none), KV-cache decode, n steps
  spec     - with --speculative K|auto: exact speculative sampling (sampler/generation.py), whose
             forward passes depend on how often drafts are accepted -- so time it on a trained model:
             --model MODEL_DIR replaces the random weights; ao, spec and ar (the same weights read left
             to right) all use it, and the encoder is left out.
`--baselines` leaves AR or the encoder (or both: `none`) out, e.g. for a row that times AO alone.
Each is run once untimed first (warm-up: allocator, kernels, flex compile). Then --repeats rounds
each time every variant once, in turn, so drift on a shared machine hits all of them alike; seconds
are medians over the rounds, and each ratio is the median of its per-round ratios (with their range).
`--graphs` (sampler/graphs.py) runs all three as static steps: on a GPU replayed from CUDA graphs, so the
ratios compare the algorithms, not Python's launch overhead; with it AR is the AO sampler's static step at
T=n in left-to-right order on the plain GPT.
Goals, reported and never asserted: encoder / AO at T=n >= 25x on a GPU at n=1024, batch 32 (issue 33;
scripts/sampler_bound.py) and >= 40x on CPU at small, n=256; AO at T=n / AR <= 1.15; AR / AO at T=n/4 >= 3.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import TYPE_CHECKING

from ..devices import add_verify_arg, device_name, resolve_device, resolve_dtype, synchronize
from ..errors import UserError
from ..model import FLAVORS
from ..sampler.options import BACKENDS, LINEAR_KERNELS, add_decode_attention_arg, add_graphs_arg
from . import command_environment, median_and_range

if TYPE_CHECKING:  # the models and samplers load when a benchmark runs, not for `--help`
    from ..model import AOGPT
    from ..sampler.choices import SamplerChoices


def add_to(subparsers) -> None:
    p = subparsers.add_parser("sampler", help="AO sampler vs encoder-only MDM vs AR decode speed, one run")
    p.add_argument("--flavor", default="small", help=f"model size: {', '.join(FLAVORS)} (default small)")
    p.add_argument("--n", type=int, default=256, help="tokens per sample (default 256)")
    p.add_argument("--batch", type=int, default=1, help="samples per batch (default 1)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on cuda, else fp32)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="AO/AR attention backend")
    p.add_argument(
        "--linears", choices=LINEAR_KERNELS, default="auto", help="Linear kernels of all three (sampler/decoder.py)"
    )
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of every variant (default 3)")
    p.add_argument("--model", default=None, metavar="MODEL_DIR", help="a converted (trained) model instead of --flavor")
    p.add_argument("--speculative", default=None, metavar="K|auto", help="also time speculative sampling")
    add_graphs_arg(p)
    add_decode_attention_arg(p)
    p.add_argument(
        "--baselines",
        default="ar,encoder",
        metavar="LIST",
        help="what AO is timed against: a comma list of ar, encoder, or none (default ar,encoder; --model: no encoder)",
    )
    p.add_argument(
        "--T", dest="t_values", choices=("all", "n"), default="all", help="step counts timed: n, n/4, n/16 (all) or n"
    )
    p.add_argument(
        "--step-profile",
        default=None,
        metavar="FILE",
        help="also profile AO decode steps from the middle of a generation at each timed T (of two forwards or "
        "more; with --graphs on|compile|static: replayed as the timed runs replay them) and write their kernels, "
        "launches and microseconds per step to FILE (JSON, by T; bench/decode_profile.py)",
    )
    add_verify_arg(p)
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (scripts/update_benchmarks_doc.py reads it)"
    )
    p.set_defaults(run=run)


def step_values(n: int) -> list[int]:
    """T in {n, n/4, n/16}, at least 1, without repeats."""
    return list(dict.fromkeys(max(1, n // d) for d in (1, 4, 16)))


BASELINES = ("ar", "encoder")
ENCODER_TIMED_FORWARDS = 16  # the encoder's forwards a round times (its cost per forward does not depend on T)


def parse_baselines(text: str) -> tuple[str, ...]:
    """`--baselines`: a comma list of BASELINES, or none; one UserError otherwise."""
    items = () if text == "none" else tuple(text.split(","))
    if text != "none" and (not all(b in BASELINES for b in items) or len(set(items)) != len(items)):
        raise UserError(f"--baselines {text!r} is not a comma list of {', '.join(BASELINES)}, or none")
    return items


def check_args(args) -> None:
    from ..model_dir import read_config
    from ..sampler.speculative import parse_draft

    args.baselines = parse_baselines(args.baselines)
    if args.speculative is not None:
        args.speculative = parse_draft(args.speculative)
    if args.model is not None:
        positions, what = read_config(args.model).model_args.max_seq_len, args.model
    elif args.flavor not in FLAVORS:
        raise UserError(f"--flavor {args.flavor!r} is unknown; allowed: {', '.join(FLAVORS)}")
    else:
        positions, what = FLAVORS[args.flavor].max_seq_len, args.flavor
    if not 1 <= args.n <= positions:
        raise UserError(f"--n {args.n} is outside 1..{positions} (positions of {what})")
    if args.batch < 1:
        raise UserError(f"--batch {args.batch} must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be >= 1")
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats} must be >= 1")
    if args.step_profile is not None:
        if args.n < 2:
            raise UserError(f"--step-profile needs --n >= 2 (a step before the profiled ones); got --n {args.n}")
        folder = os.path.dirname(os.path.abspath(args.step_profile))
        if not os.path.isdir(folder):
            raise UserError(f"--step-profile {args.step_profile!r}: folder {folder} does not exist")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def headline_ratios(seconds: dict[str, float], n: int) -> dict[str, float]:
    """The headline ratios of one round; `seconds` maps "ao T", "encoder T", "ar" and "spec" (those
    that ran) to seconds."""
    quarter = max(1, n // 4)
    ratios = {
        "ao_vs_encoder_speedup": (f"encoder {n}", f"ao {n}"),
        "ao_vs_ar_time_ratio": (f"ao {n}", "ar"),
        "ao_quarter_vs_ar_speedup": ("ar", f"ao {quarter}"),
        "spec_vs_sequential_speedup": (f"ao {n}", "spec"),
        "spec_vs_ar_time_ratio": ("spec", "ar"),
    }
    return {k: seconds[a] / seconds[b] for k, (a, b) in ratios.items() if a in seconds and b in seconds}


def summarize(rounds: list[dict[str, float]], n: int) -> dict:
    """Median seconds per variant; per ratio, the median and [min, max] of its per-round values
    (a round's variants ran back to back, so its ratios pair like with like)."""
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    per_round = [headline_ratios(r, n) for r in rounds]
    ratios, spread = {}, {}
    for key in per_round[0]:
        ratios[key], spread[key] = median_and_range([r[key] for r in per_round])
    return {"median_seconds": medians, "ratios": ratios, "ratio_range": spread}


def run_bench(
    flavor: str,
    n: int,
    batch: int,
    device,
    dtype,
    choices: SamplerChoices,
    repeats: int = 1,
    model: AOGPT | None = None,
    speculative: int | str | None = None,
    t_values: str = "all",
    profile_steps: int = 0,
    baselines: tuple[str, ...] = BASELINES,
) -> dict:
    """Median timings (seconds) over `repeats` interleaved rounds, forward-pass counts, and the
    headline ratios. `choices`: the run's graphs mode, attention and Linear kernel, resolved once
    (sampler/choices.py) and applied to all three alike: with graphs on, AR decoding is the AO sampler's
    static step at T=n with the identity order on the conditioning-free backbone. `model` (trained
    weights) replaces the flavor's random AO and AR models and drops the encoder. `profile_steps` > 0 (a
    static graphs mode) adds "step_profile": that many AO decode steps profiled at each T (decode_profile.py).
    `baselines`: which of AR and the encoder run (the encoder: ENCODER_TIMED_FORWARDS forwards a round)."""
    from ..sampler.generation import SampleConfig, generate, speculative_generate
    from ..sampler.graphs import STEADY_CALL
    from .baselines import ar_generate, build_decoder, build_encoder_mdm, encoder_forwards, encoder_generate

    graphs, backend, linears = choices.graphs, choices.backend, choices.linears
    steps = step_values(n) if t_values == "all" else [n]
    ao = model if model is not None else build_decoder(flavor, "adaln", device, dtype)
    ar = None
    if "ar" in baselines:
        ar = model if model is not None else build_decoder(flavor, "none", device, dtype)
    enc = build_encoder_mdm(FLAVORS[flavor], device, dtype) if model is None and "encoder" in baselines else None
    common = dict(length=n, num_samples=batch, seed=1)
    timed_forwards = min(ENCODER_TIMED_FORWARDS, n)

    def spec_run():
        return speculative_generate(ao, SampleConfig(steps=n, **common), speculative, choices=choices)[0]

    def ao_run(t: int):
        return generate(ao, SampleConfig(steps=t, **common), choices=choices)

    def enc_run():  # the first forwards of a T=n run: a forward's work is the same at every T
        return encoder_generate(enc, n, n, batch, seed=1, choices=choices, forwards=timed_forwards)

    def ar_run():
        if choices.static_step:  # the same noise as ar_generate's: the same tokens
            return generate(ar, SampleConfig(steps=n, order="l2r", **common), choices=choices)
        return ar_generate(ar, n, batch, seed=1, backend=backend, linears=linears)

    variants = {f"ao {t}": lambda t=t: ao_run(t) for t in steps}
    if speculative is not None:
        variants["spec"] = spec_run
    if ar is not None:
        variants["ar"] = ar_run
    if enc is not None:
        variants["encoder"] = enc_run
        enc_forwards = {t: encoder_forwards(n, t, batch, seed=1) for t in steps}

    warm_runs = STEADY_CALL if graphs in ("on", "compile") else 1  # `static` runs every call eagerly
    _log(f"bench sampler: {flavor} n={n} batch={batch} on {device_name(device)}, graphs {graphs}; warm-up")
    if not choices.static_step:
        ao_run(steps[-1])
        ao_run(steps[0])
    else:  # every step shape of every variant compiled and captured before the timed rounds: a shape that
        # comes once a generation (the first step of T < n) reaches its replay at its STEADY_CALL-th run
        for t in steps:
            for _ in range(warm_runs):
                ao_run(t)
    if enc is not None:  # one step shape, called timed_forwards times a run
        for _ in range(1 if timed_forwards >= warm_runs else warm_runs):
            enc_run()
    for _ in range(warm_runs):
        if speculative is not None:
            spec_run()
        if ar is not None:
            ar_run()
    synchronize(device)
    rounds, forwards = [], {}
    for i in range(repeats):
        times = {}
        for name, run_variant in variants.items():
            r = run_variant()
            _log(f"  round {i + 1}/{repeats}  {name:12s}: {r.seconds:8.3f} s  {r.forward_passes} forwards")
            if name != "encoder":
                times[name], forwards[name] = r.seconds, r.forward_passes
                continue
            for t in steps:  # the encoder at T: its seconds per forward x T's forwards
                times[f"encoder {t}"] = r.seconds / r.forward_passes * enc_forwards[t]
                forwards[f"encoder {t}"] = enc_forwards[t]
        rounds.append(times)
    summary = summarize(rounds, n)
    med = summary["median_seconds"]
    profiled = {}
    if profile_steps:  # every timed T of two forwards or more: T=n/4's step against T=n's says why AR / AO(n/4) < 4
        from .decode_profile import profile_decode_steps

        profiled["step_profile"] = {}
        for t in steps:
            if forwards[f"ao {t}"] < 2:
                continue
            _log(f"  profiling {profile_steps} AO decode steps at T={t}")
            config = SampleConfig(steps=t, **common)
            profiled["step_profile"][str(t)] = profile_decode_steps(
                ao, config, choices, forwards[f"ao {t}"], profile_steps
            )
    ran = [b for b, model_ in (("ar", ar), ("encoder", enc)) if model_ is not None]
    return {
        "flavor": flavor,
        "n": n,
        "batch": batch,
        "device": device_name(device),
        "dtype": str(dtype).removeprefix("torch."),
        "backend": backend,
        "linears": linears,
        "graphs": graphs,
        "decode_attention": choices.decode_setting,
        "baselines": ran,
        "repeats": repeats,
        "steps": steps,
        "ao_seconds": {str(t): round(med[f"ao {t}"], 4) for t in steps},
        "ao_forward_passes": {str(t): forwards[f"ao {t}"] for t in steps},
        "ao_tokens_per_second": {str(t): round(n * batch / med[f"ao {t}"], 1) for t in steps},
        "ms_per_forward": {k: round(1000 * med[k] / max(forwards[k], 1), 4) for k in med},
        **summary["ratios"],
        "ratio_range": summary["ratio_range"],
        "rounds": [{k: round(v, 4) for k, v in r.items()} for r in rounds],
        **({"ar_seconds": round(med["ar"], 4), "ar_forward_passes": forwards["ar"]} if ar is not None else {}),
        **(
            {
                "encoder_seconds": {str(t): round(med[f"encoder {t}"], 4) for t in steps},
                "encoder_forward_passes": {str(t): forwards[f"encoder {t}"] for t in steps},
                "encoder_timed_forwards": timed_forwards,
                "encoder_vs_ao_speedup_by_T": {str(t): round(med[f"encoder {t}"] / med[f"ao {t}"], 3) for t in steps},
            }
            if enc is not None
            else {}
        ),
        **(
            {
                "speculative": speculative,
                "spec_seconds": round(med["spec"], 4),
                "spec_forward_passes": forwards["spec"],  # of the last round (seeded: the same every round)
                "spec_forwards_per_token": round(forwards["spec"] / n, 4),
            }
            if speculative is not None
            else {}
        ),
        **profiled,
    }


PROFILED_STEPS = 8  # decode steps in a --step-profile window: a step is 0.1-15 ms, so the window stays short


def write_step_profile(path: str, result: dict) -> None:
    """The full profiles to `path` (JSON: one per T, each with its text table); the bench's own result keeps
    their per-step totals."""
    from ..temporaries import write_file
    from .decode_profile import format_kernels

    profiles = result.pop("step_profile")
    tables = {t: format_kernels(profile) for t, profile in profiles.items()}
    meta = {k: result[k] for k in ("flavor", "n", "batch", "dtype", "backend", "linears", "graphs", "decode_attention")}
    by_t = {t: {**profile, "table": tables[t]} for t, profile in profiles.items()}
    write_file(path, (json.dumps({**meta, "by_T": by_t}, indent=1) + "\n").encode(), f"--step-profile {path!r}")
    totals = {t: {k: v for k, v in profile.items() if k != "kernels"} for t, profile in profiles.items()}
    result["step_profile"] = {"path": path, "by_T": totals}
    _log("\n".join(line for table in tables.values() for line in table))


def command_line(argv: list[str]) -> str:
    return command_environment() + "aogpt bench sampler " + " ".join(argv)


def run(args) -> int:
    import torch

    from ..model_dir import load_model_dir, read_config
    from ..sampler.choices import resolve_choices

    check_args(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    model_args = read_config(args.model).model_args if args.model is not None else FLAVORS[args.flavor]
    # a bad combination fails here, before any model is built
    choices = resolve_choices(
        args.graphs, args.backend, args.linears, device, dtype, model_args.head_dim,
        decode_attention=args.decode_attention,
    )  # fmt: skip
    if args.step_profile is not None and not choices.static_step:
        raise UserError(
            f"--step-profile profiles the static step; --graphs {args.graphs} runs the dynamic sampler on "
            f"{device.type}; allowed with it: on, compile, static"
        )
    model = None
    if args.model is not None:
        model = load_model_dir(args.model, device, dtype, verify=args.verify).model.eval().requires_grad_(False)
    result = run_bench(
        args.flavor,
        args.n,
        args.batch,
        device,
        dtype,
        choices,
        args.repeats,
        model,
        args.speculative,
        args.t_values,
        PROFILED_STEPS if args.step_profile is not None else 0,
        args.baselines,
    )
    if args.step_profile is not None:
        write_step_profile(args.step_profile, result)
    source = f"--model {args.model}" if args.model else f"--flavor {args.flavor}"
    argv = [source, f"--n {args.n}", f"--batch {args.batch}", f"--repeats {args.repeats}"]
    if args.speculative is not None:
        argv.append(f"--speculative {args.speculative}")
    if args.device != "auto":
        argv.append(f"--device {args.device}")
    if args.dtype:
        argv.append(f"--dtype {args.dtype}")
    if args.backend != "auto":
        argv.append(f"--backend {args.backend}")
    if args.linears != "auto":
        argv.append(f"--linears {args.linears}")
    if args.graphs != "auto":
        argv.append(f"--graphs {args.graphs}")
    if args.decode_attention != "auto":
        argv.append(f"--decode-attention {args.decode_attention}")
    if args.baselines != BASELINES:
        argv.append(f"--baselines {','.join(args.baselines) or 'none'}")
    if args.t_values != "all":
        argv.append(f"--T {args.t_values}")
    if args.step_profile is not None:
        argv.append(f"--step-profile {args.step_profile}")
    if args.threads is not None:
        argv.append(f"--threads {args.threads}")
    if args.json:
        argv.append("--json")
    result["command"] = command_line(argv)
    if args.json:
        print(json.dumps(result))
        return 0
    n = args.n
    print(
        f"{args.model or args.flavor} n={n} batch={args.batch} on {result['device']} ({result['dtype']}, "
        f"{result['linears']} linears, graphs {result['graphs']}"
        + (f", decode attention {result['decode_attention']})" if result["decode_attention"] else ")")
    )
    for t in result["steps"]:
        line = f"  T={t:5d}  ao {result['ao_seconds'][str(t)]:9.3f} s ({result['ao_forward_passes'][str(t)]} fwd)"
        if "encoder_seconds" in result:
            line += (
                f"  encoder {result['encoder_seconds'][str(t)]:9.3f} s ({result['encoder_forward_passes'][str(t)]} fwd)"
                f"  encoder/ao {result['encoder_vs_ao_speedup_by_T'][str(t)]:7.2f}x"
            )
        print(line)
    if "spec_seconds" in result:
        print(
            f"  speculative {result['speculative']}: {result['spec_seconds']:.3f} s ({result['spec_forward_passes']} fwd, "
            f"{result['spec_forwards_per_token']:.3f} per token)"
        )
    if "ar_seconds" in result:
        print(f"  AR decode {result['ar_seconds']:.3f} s ({result['ar_forward_passes']} fwd)")
    per_step = result["ms_per_forward"]
    line = f"  ms per forward: ao T=n {per_step[f'ao {n}']:.3f}"
    if "ar" in per_step:
        line += f", ar {per_step['ar']:.3f}"
    if f"encoder {n}" in per_step:
        line += f", encoder {per_step[f'encoder {n}']:.3f}"
    print(line)
    print(f"  medians of {args.repeats} rounds; ratios: median of the per-round ratios [min, max]")
    lo_hi = result["ratio_range"]
    for key, label, goal in (
        ("ao_vs_encoder_speedup", "encoder / AO at T=n", "goal >= 25x GPU at n=1024 b=32, >= 40x CPU"),
        ("ao_vs_ar_time_ratio", "AO at T=n / AR", "goal <= 1.15"),
        ("ao_quarter_vs_ar_speedup", "AR / AO at T=n/4", "goal >= 3x"),
        ("spec_vs_sequential_speedup", "AO T=n / speculative", "exact: same distribution"),
        ("spec_vs_ar_time_ratio", "speculative / AR", "< 1: faster than AR decode"),
    ):
        if key in result:
            print(f"  {label:21s} {result[key]:7.3f}  [{lo_hi[key][0]:.3f}, {lo_hi[key][1]:.3f}]  ({goal})")
    return 0
