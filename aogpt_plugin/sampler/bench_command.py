"""`aogpt bench sampler`: AO sampler vs encoder-only MDM vs AR decode, timed in one run (not a test).

All three use random weights of one flavor (timing does not depend on the weights):
  ao       - AO-GPT (adaLN) with the cached any-order sampler, T in {n, n/4, n/16}
  encoder  - the bidirectional MDM of the same width/depth, T full-sequence forwards, same T values
  ar       - a plain causal GPT of the same backbone (conditioning=none), KV-cache decode, n steps
Each is run once untimed first (warm-up: allocator, kernels, flex compile), then timed once.
Issue-3 goals, reported and never asserted: encoder / AO at T=n >= 25x on GPU (>= 40x on CPU at
small, n=256); AO at T=n / AR <= 1.15; AR / AO at T=n/4 >= 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

from ..errors import UserError
from ..model import AOGPT
from ..model.flavors import FLAVORS
from .ar_decode import ar_generate
from .bench_docs import DEFAULT_DOCS, write_rows
from .device import device_name, resolve_device, resolve_dtype, synchronize
from .encoder_mdm import build_encoder_mdm, encoder_generate
from .generate import SampleConfig, generate, noise_generator
from .linears import LINEAR_KERNELS, resolve_linear_kernel


def add_to(subparsers) -> None:
    p = subparsers.add_parser("sampler", help="AO sampler vs encoder-only MDM vs AR decode speed, one run")
    p.add_argument("--flavor", default="small", help=f"model size: {', '.join(FLAVORS)} (default small)")
    p.add_argument("--n", type=int, default=256, help="tokens per sample (default 256)")
    p.add_argument("--batch", type=int, default=1, help="samples per batch (default 1)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on cuda, else fp32)")
    p.add_argument("--backend", choices=("auto", "sdpa", "flex"), default="auto", help="AO/AR attention backend")
    p.add_argument("--linears", choices=LINEAR_KERNELS, default="auto", help="Linear kernels of all three (linears.py)")
    p.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--write-docs", action="store_true", help=f"add this run's rows to {DEFAULT_DOCS}")
    p.add_argument("--docs", default=None, help=argparse.SUPPRESS)  # another markdown file (tests)
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


def run_bench(flavor: str, n: int, batch: int, device, dtype, backend: str = "auto", linears: str = "aten") -> dict:
    """Timings (seconds) and forward-pass counts of every variant, plus the headline ratios.
    `linears` is a resolved kernel (aten | onednn, see linears.resolve_linear_kernel)."""
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

    _log(f"bench sampler: {flavor} n={n} batch={batch} on {device_name(device)}; warm-up")
    ao_run(steps[-1])
    ao_run(steps[0])
    encoder_generate(enc, n, min(2, n), batch, seed=1, linears=linears)
    ar_run()
    synchronize(device)
    out: dict = {"ao": {}, "encoder": {}}
    for t in steps:
        r = ao_run(t)
        out["ao"][t] = {"seconds": r.seconds, "forward_passes": r.forward_passes}
        _log(f"  ao      T={t:5d}: {r.seconds:8.3f} s  {r.forward_passes} forwards")
    r = ar_run()
    out["ar"] = {"seconds": r.seconds, "forward_passes": r.forward_passes}
    _log(f"  ar      T={n:5d}: {r.seconds:8.3f} s  {r.forward_passes} forwards")
    for t in steps:
        r = enc_run(t)
        out["encoder"][t] = {"seconds": r.seconds, "forward_passes": r.forward_passes}
        _log(f"  encoder T={t:5d}: {r.seconds:8.3f} s  {r.forward_passes} forwards")
    ao_n, ar_s = out["ao"][n]["seconds"], out["ar"]["seconds"]
    quarter = max(1, n // 4)
    return {
        "flavor": flavor,
        "n": n,
        "batch": batch,
        "device": device_name(device),
        "dtype": str(dtype).removeprefix("torch."),
        "backend": backend,
        "linears": linears,
        "steps": steps,
        "ao_seconds": {str(t): round(v["seconds"], 4) for t, v in out["ao"].items()},
        "ao_forward_passes": {str(t): v["forward_passes"] for t, v in out["ao"].items()},
        "encoder_seconds": {str(t): round(v["seconds"], 4) for t, v in out["encoder"].items()},
        "encoder_forward_passes": {str(t): v["forward_passes"] for t, v in out["encoder"].items()},
        "ar_seconds": round(ar_s, 4),
        "ar_forward_passes": out["ar"]["forward_passes"],
        "ao_tokens_per_second": {str(t): round(n * batch / v["seconds"], 1) for t, v in out["ao"].items()},
        "ao_vs_encoder_speedup": round(out["encoder"][n]["seconds"] / ao_n, 3),
        "ao_vs_ar_time_ratio": round(ao_n / ar_s, 3),
        "ao_quarter_vs_ar_speedup": round(ar_s / out["ao"][quarter]["seconds"], 3),
        "encoder_vs_ao_speedup_by_T": {
            str(t): round(out["encoder"][t]["seconds"] / out["ao"][t]["seconds"], 3) for t in steps
        },
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
    result = run_bench(args.flavor, args.n, args.batch, device, dtype, args.backend, linears)
    argv = [f"--flavor {args.flavor}", f"--n {args.n}", f"--batch {args.batch}"]
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
    result["command"] = command_line(argv + ["--write-docs"] if args.write_docs else argv)
    if args.write_docs:
        path = args.docs or DEFAULT_DOCS
        write_rows(path, result)
        _log(f"wrote rows to {os.path.relpath(path)}")
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
    print(f"  encoder / AO at T=n:   {result['ao_vs_encoder_speedup']:.2f}x  (goal >= 25x GPU, >= 40x CPU)")
    print(f"  AO at T=n / AR:        {result['ao_vs_ar_time_ratio']:.3f}   (goal <= 1.15)")
    print(f"  AR / AO at T=n/4:      {result['ao_quarter_vs_ar_speedup']:.2f}x  (goal >= 3x)")
    return 0
