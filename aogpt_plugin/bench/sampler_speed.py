"""`aogpt bench sampler`: AO sampler vs encoder-only MDM vs AR decode, timed in one run (not a test).

All three use random weights of one flavor (timing does not depend on the weights):
  ao       - AO-GPT (adaLN) with the cached any-order sampler, T in {n, n/4, n/16}
  encoder  - the bidirectional MDM of the same width/depth, T full-sequence forwards, same T values
  ar       - a plain causal GPT of the same backbone (conditioning=none), KV-cache decode, n steps
Each is run once untimed first (warm-up: allocator, kernels, flex compile). Then --repeats rounds
each time every variant once, in turn, so drift on a shared machine hits all of them alike; seconds
are medians over the rounds, and each ratio is the median of its per-round ratios (with their range).
Issue-3 goals, reported and never asserted: encoder / AO at T=n >= 25x on GPU (>= 40x on CPU at
small, n=256); AO at T=n / AR <= 1.15; AR / AO at T=n/4 >= 3.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys

import torch

from ..devices import device_name, resolve_device, resolve_dtype, synchronize
from ..errors import UserError
from ..model import AOGPT, FLAVORS
from ..sampler.decode_view import LINEAR_KERNELS, resolve_linear_kernel
from ..sampler.generate import SampleConfig, generate, noise_generator
from .ar_decode import ar_generate
from .encoder_mdm import build_encoder_mdm, encoder_generate


def add_to(subparsers) -> None:
    p = subparsers.add_parser("sampler", help="AO sampler vs encoder-only MDM vs AR decode speed, one run")
    p.add_argument("--flavor", default="small", help=f"model size: {', '.join(FLAVORS)} (default small)")
    p.add_argument("--n", type=int, default=256, help="tokens per sample (default 256)")
    p.add_argument("--batch", type=int, default=1, help="samples per batch (default 1)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on cuda, else fp32)")
    p.add_argument("--backend", choices=("auto", "sdpa", "flex"), default="auto", help="AO/AR attention backend")
    p.add_argument(
        "--linears", choices=LINEAR_KERNELS, default="auto", help="Linear kernels of all three (sampler/decode_view.py)"
    )
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of every variant (default 3)")
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (scripts/update_benchmarks_doc.py reads it)"
    )
    p.set_defaults(run=run)


def step_values(n: int) -> list[int]:
    """T in {n, n/4, n/16}, at least 1, without repeats."""
    return list(dict.fromkeys(max(1, n // d) for d in (1, 4, 16)))


def check_args(args) -> None:
    if args.flavor not in FLAVORS:
        raise UserError(f"--flavor {args.flavor!r} is unknown; allowed: {', '.join(FLAVORS)}")
    positions = FLAVORS[args.flavor].max_seq_len
    if not 1 <= args.n <= positions:
        raise UserError(f"--n {args.n} is outside 1..{positions} (positions of {args.flavor})")
    if args.batch < 1:
        raise UserError(f"--batch {args.batch} must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be >= 1")
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats} must be >= 1")


def build_decoder(flavor: str, conditioning: str, device, dtype) -> AOGPT:
    args = dataclasses.replace(FLAVORS[flavor], conditioning=conditioning)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = AOGPT(args)
    model.to_empty(device=device)
    model.init_weights()
    return model.to(dtype).eval().requires_grad_(False)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def headline_ratios(seconds: dict[str, float], n: int) -> dict[str, float]:
    """The issue-3 ratios of one round; `seconds` maps "ao T", "encoder T" and "ar" to seconds."""
    quarter = max(1, n // 4)
    return {
        "ao_vs_encoder_speedup": seconds[f"encoder {n}"] / seconds[f"ao {n}"],
        "ao_vs_ar_time_ratio": seconds[f"ao {n}"] / seconds["ar"],
        "ao_quarter_vs_ar_speedup": seconds["ar"] / seconds[f"ao {quarter}"],
    }


def summarize(rounds: list[dict[str, float]], n: int) -> dict:
    """Median seconds per variant; per ratio, the median and [min, max] of its per-round values
    (a round's variants ran back to back, so its ratios pair like with like)."""
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    per_round = [headline_ratios(r, n) for r in rounds]
    ratios, spread = {}, {}
    for key in per_round[0]:
        values = [r[key] for r in per_round]
        ratios[key] = round(statistics.median(values), 3)
        spread[key] = [round(min(values), 3), round(max(values), 3)]
    return {"median_seconds": medians, "ratios": ratios, "ratio_range": spread}


def run_bench(
    flavor: str, n: int, batch: int, device, dtype, backend: str = "auto", linears: str = "aten", repeats: int = 1
) -> dict:
    """Median timings (seconds) over `repeats` interleaved rounds, forward-pass counts, and the
    headline ratios. `linears` is a resolved kernel (aten | onednn, see linears.resolve_linear_kernel)."""
    steps = step_values(n)
    ao = build_decoder(flavor, "adaln", device, dtype)
    ar = build_decoder(flavor, "none", device, dtype)
    enc = build_encoder_mdm(FLAVORS[flavor], device, dtype)

    def ao_run(t: int):
        return generate(
            ao, SampleConfig(length=n, steps=t, num_samples=batch, seed=1, backend=backend, linears=linears)
        )

    def enc_run(t: int):
        return encoder_generate(enc, n, t, batch, seed=1, linears=linears)

    def ar_run():
        return ar_generate(ar, n, batch, generator=noise_generator(1, device), backend=backend, linears=linears)

    variants = {f"ao {t}": lambda t=t: ao_run(t) for t in steps}
    variants["ar"] = ar_run
    variants.update({f"encoder {t}": lambda t=t: enc_run(t) for t in steps})

    _log(f"bench sampler: {flavor} n={n} batch={batch} on {device_name(device)}; warm-up")
    ao_run(steps[-1])
    ao_run(steps[0])
    encoder_generate(enc, n, min(2, n), batch, seed=1, linears=linears)
    ar_run()
    synchronize(device)
    rounds, forwards = [], {}
    for i in range(repeats):
        times = {}
        for name, run_variant in variants.items():
            r = run_variant()
            times[name], forwards[name] = r.seconds, r.forward_passes
            _log(f"  round {i + 1}/{repeats}  {name:12s}: {r.seconds:8.3f} s  {r.forward_passes} forwards")
        rounds.append(times)
    summary = summarize(rounds, n)
    med = summary["median_seconds"]
    return {
        "flavor": flavor,
        "n": n,
        "batch": batch,
        "device": device_name(device),
        "dtype": str(dtype).removeprefix("torch."),
        "backend": backend,
        "linears": linears,
        "repeats": repeats,
        "steps": steps,
        "ao_seconds": {str(t): round(med[f"ao {t}"], 4) for t in steps},
        "ao_forward_passes": {str(t): forwards[f"ao {t}"] for t in steps},
        "encoder_seconds": {str(t): round(med[f"encoder {t}"], 4) for t in steps},
        "encoder_forward_passes": {str(t): forwards[f"encoder {t}"] for t in steps},
        "ar_seconds": round(med["ar"], 4),
        "ar_forward_passes": forwards["ar"],
        "ao_tokens_per_second": {str(t): round(n * batch / med[f"ao {t}"], 1) for t in steps},
        **summary["ratios"],
        "ratio_range": summary["ratio_range"],
        "encoder_vs_ao_speedup_by_T": {str(t): round(med[f"encoder {t}"] / med[f"ao {t}"], 3) for t in steps},
        "rounds": [{k: round(v, 4) for k, v in r.items()} for r in rounds],
    }


def command_line(argv: list[str]) -> str:
    return "aogpt bench sampler " + " ".join(argv)


def run(args) -> int:
    check_args(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    linears = resolve_linear_kernel(args.linears, device, dtype)  # a bad combination fails before any model is built
    result = run_bench(args.flavor, args.n, args.batch, device, dtype, args.backend, linears, args.repeats)
    argv = [f"--flavor {args.flavor}", f"--n {args.n}", f"--batch {args.batch}", f"--repeats {args.repeats}"]
    if args.device != "auto":
        argv.append(f"--device {args.device}")
    if args.dtype:
        argv.append(f"--dtype {args.dtype}")
    if args.backend != "auto":
        argv.append(f"--backend {args.backend}")
    if args.linears != "auto":
        argv.append(f"--linears {args.linears}")
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
        f"{args.flavor} n={n} batch={args.batch} on {result['device']} ({result['dtype']}, {result['linears']} linears)"
    )
    for t in result["steps"]:
        print(
            f"  T={t:5d}  ao {result['ao_seconds'][str(t)]:9.3f} s ({result['ao_forward_passes'][str(t)]} fwd)"
            f"  encoder {result['encoder_seconds'][str(t)]:9.3f} s ({result['encoder_forward_passes'][str(t)]} fwd)"
            f"  encoder/ao {result['encoder_vs_ao_speedup_by_T'][str(t)]:7.2f}x"
        )
    print(f"  AR decode {result['ar_seconds']:.3f} s ({result['ar_forward_passes']} fwd)")
    print(f"  medians of {args.repeats} rounds; ratios: median of the per-round ratios [min, max]")
    lo_hi = result["ratio_range"]
    for key, label, goal in (
        ("ao_vs_encoder_speedup", "encoder / AO at T=n", "goal >= 25x GPU, >= 40x CPU"),
        ("ao_vs_ar_time_ratio", "AO at T=n / AR", "goal <= 1.15"),
        ("ao_quarter_vs_ar_speedup", "AR / AO at T=n/4", "goal >= 3x"),
    ):
        print(f"  {label:21s} {result[key]:7.3f}  [{lo_hi[key][0]:.3f}, {lo_hi[key][1]:.3f}]  ({goal})")
    return 0
