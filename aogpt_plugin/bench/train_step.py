"""`aogpt bench train`: AO-GPT vs plain AR training step time for one flavor, measured in one run.

Both variants share the backbone; AO adds the target-position table, the per-block adaLN
projections (SiLU -> Linear(128, 6d)) and a gather of the permuted tokens, AR is `conditioning=none`
read left to right. A step is forward + summed cross-entropy + backward + AdamW step, on random
tokens (data loading is excluded on purpose: it is identical for both), as the recipes run it: the
training loss (chunked over rows) inside autocast, compiled with the model under `--compile`
(`blocks`: each TransformerBlock, torchtitan's way; `model`: the whole model), fused AdamW on CUDA.
`--loss-path logits,fused` times each variant on both of `[aogpt] loss_path`'s paths in the same rounds
(`ao` on the logits path, `ao+fused` with the head fused into the loss: model.forward(..., labels)).
`--profile` profiles the steps instead and prints them by kernel category (step_profile.py). Variants are timed in
interleaved rounds so that drift (thermal, other processes) hits both alike: each round times every
variant for --steps steps in turn, and prints its medians as it goes (stderr). Step times are
medians over all timed steps; the AO / AR headline is the median of the per-round ratios (each
round's AO median / AR median, timed back to back, so drift between rounds cancels), with their
[min, max], printed next to every per-round ratio and the ratio of the overall medians: the two
differ when rounds disagree, i.e. when the machine's speed changed during the run. TFLOP/s count the
FLOPs a variant executes (AOGPTModelArgs.get_nparams_and_flops at the bench's micro-batch: adaLN once per
position of the step's tables); the AR-equivalent TFLOP/s count AR's FLOPs for the same tokens per second,
so AO and AR compare on one numerator (docs/training.md). MFU divides them by the device's dense bf16 peak
(H100/H200: 989.4 TFLOP/s) and is reported only for bf16 on a GPU of BF16_PEAK_FLOPS (never on a CPU).
Goal (issue 2): AO / AR <= 1.10.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from functools import partial

from ..devices import device_name, resolve_device, synchronize
from ..errors import UserError
from ..model import FLAVORS
from ..model.args import LOSS_PATHS
from . import command_environment, median_and_range

# dense bf16 peak FLOP/s (no sparsity) by device-name fragment, for MFU; other devices report none
BF16_PEAK_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
VARIANTS = {"ar": ("none", "l2r"), "ao": ("adaln", "uniform"), "sigma": ("concat", "uniform")}
COMPILE_SCOPES = ("blocks", "model")  # torch.compile per TransformerBlock (torchtitan's way) or the whole model


def add_to(subparsers) -> None:
    p = subparsers.add_parser("train", help="AO vs AR training step time (forward+backward+AdamW), one run")
    p.add_argument("--flavor", default="tiny", help=f"model size: {', '.join(FLAVORS)} (default tiny)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the flavor's positions)")
    p.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per variant and round (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant first (default 3)")
    p.add_argument("--variants", default="ar,ao", help=f"comma list of {', '.join(VARIANTS)} (default ar,ao)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="autocast dtype (cuda: bf16)")
    p.add_argument(
        "--compile",
        nargs="?",
        const="blocks",
        default=None,
        choices=COMPILE_SCOPES,
        help="torch.compile each block, as the recipes do (`--compile` = blocks), or the whole model (model)",
    )
    p.add_argument(
        "--loss-path",
        default="logits",
        help=f"comma list of [aogpt] loss_path's paths to time each variant on: {', '.join(LOSS_PATHS)} (default "
        "logits; fused: the head's GEMM chunked with the loss, no logits tensor)",
    )
    p.add_argument(
        "--loss-chunk-rows",
        type=int,
        default=None,
        help="rows of logits the logits path's eager loss upcasts at a time (default: the training loss's, "
        "cross_entropy.LOSS_CHUNK_ROWS; 0: the whole batch at once); compiled, the loss has no chunks",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing rounds (--rounds does not apply), profile --steps steps per variant after the "
        "warm-up and summarise them by kernel category (matmul, attention, loss, elementwise/norm, optimizer, "
        "communication, idle)",
    )
    p.add_argument("--profile-trace", default=None, metavar="DIR", help="with --profile: Chrome traces to DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def check_args(args) -> list[str]:
    if args.flavor not in FLAVORS:
        raise UserError(f"--flavor {args.flavor!r} is unknown; allowed: {', '.join(FLAVORS)}")
    positions = FLAVORS[args.flavor].max_seq_len
    if args.seq_len is not None and not 2 <= args.seq_len <= positions:
        raise UserError(f"--seq-len {args.seq_len} is outside 2..{positions} (positions of {args.flavor})")
    for name in ("batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} {getattr(args, name)} must be >= 1")
    if args.warmup < 0:
        raise UserError(f"--warmup {args.warmup} must be >= 0")
    if args.loss_chunk_rows is not None and args.loss_chunk_rows < 0:
        raise UserError(f"--loss-chunk-rows {args.loss_chunk_rows} must be >= 0 (0: the whole batch at once)")
    if args.profile_trace and not args.profile:
        raise UserError("--profile-trace needs --profile")
    if args.profile and args.compile and args.warmup < 1:
        raise UserError("--profile with --compile needs --warmup >= 1 (else it profiles the compilation)")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise UserError(f"--variants {args.variants!r} is not a comma list of {', '.join(VARIANTS)}")
    paths = [p.strip() for p in args.loss_path.split(",") if p.strip()]
    if not paths or any(p not in LOSS_PATHS for p in paths) or len(set(paths)) < len(paths):
        raise UserError(f"--loss-path {args.loss_path!r} is not a comma list of {', '.join(LOSS_PATHS)}")
    return [variant_name(v, p) for p in paths for v in variants]


def variant_name(variant: str, loss_path: str) -> str:
    """`ao` on the logits path, `ao+fused` on the fused one."""
    return variant if loss_path == "logits" else f"{variant}+{loss_path}"


def split_name(name: str) -> tuple[str, str]:
    """(variant, loss path) of a `variant_name`."""
    variant, _, path = name.partition("+")
    return variant, path or "logits"


class Variant:
    """One model + optimizer + fixed batch; `step()` runs one full training step."""

    def __init__(
        self,
        flavor: str,
        conditioning: str,
        order: str,
        seq_len: int,
        batch: int,
        device,
        dtype,
        compile: str | None,
        loss_chunk_rows: int | None = None,
        loss_path: str = "logits",
    ):
        import torch

        from ..cross_entropy import LOSS_CHUNK_ROWS, ao_cross_entropy
        from ..model import AOGPT

        args = dataclasses.replace(FLAVORS[flavor], conditioning=conditioning)
        torch.manual_seed(0)
        with torch.device("meta"):
            self.model = AOGPT(args)
        self.model.to_empty(device=device)
        self.model.init_weights()
        self.forward = self.model
        if compile == "blocks":
            for name, block in self.model.layers.named_children():
                self.model.layers.register_module(name, torch.compile(block))
        elif compile == "model":
            self.forward = torch.compile(self.model)
        if loss_chunk_rows is None:
            loss_chunk_rows = LOSS_CHUNK_ROWS
        self.loss_chunk_rows = loss_chunk_rows or batch * seq_len  # 0: the whole batch in one chunk
        self.fused = loss_path == "fused"  # the model's forward takes the labels and returns the summed loss
        self.loss = partial(ao_cross_entropy, vocab_size=args.vocab_size, chunk_rows=self.loss_chunk_rows)
        if compile and not self.fused:  # the recipes compile the loss too (`[compile] components = ["model", "loss"]`)
            self.loss = torch.compile(self.loss)
        # the recipes' AdamW (`implementation = "fused"` on GPUs)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.05, fused=device.type == "cuda"
        )
        g = torch.Generator().manual_seed(1)
        self.tokens = torch.randint(0, args.vocab_size, (batch, seq_len), generator=g).to(device)
        if order == "l2r":
            self.order = None
            self.labels = self.tokens
        else:
            self.order = torch.stack([torch.randperm(seq_len, generator=g) for _ in range(batch)]).to(device)
            self.labels = None  # gathered inside the step, as the dataloader does per batch
        self.device, self.dtype = device, dtype
        self.tokens_per_step = batch * seq_len
        self.flops_per_token = args.get_nparams_and_flops(self.model, seq_len, micro_batch=batch)[1]
        self.ar_flops_per_token = ar_flops_per_token(flavor, seq_len)

    def resident_bytes(self) -> int:
        """Bytes this variant holds between steps: weights, buffers, optimizer state and its batch."""
        import torch

        tensors = [*self.model.parameters(), *self.model.buffers(), self.tokens]
        tensors += [t for state in self.opt.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
        tensors += [] if self.order is None else [self.order]
        return sum(t.numel() * t.element_size() for t in tensors)

    def step(self) -> None:
        import torch
        from torch.profiler import record_function

        labels = self.labels if self.order is None else torch.gather(self.tokens, 1, self.order)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            if self.fused:  # the head and the loss inside the forward (the profile counts it there)
                loss = self.forward(self.tokens, self.order, labels)
            else:
                logits = self.forward(self.tokens, self.order)
                with record_function("aogpt.loss"):  # the training loss: real vocabulary only, chunked over rows
                    loss = self.loss(logits, labels)
                del logits  # as torchtitan does before backward
        (loss / self.tokens_per_step).backward()
        with record_function("aogpt.optimizer"):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)


def ar_flops_per_token(flavor: str, seq_len: int) -> float:
    """AR's training FLOPs per token (the flavor's backbone without conditioning), for the AR-equivalent count."""
    import torch

    from ..model import AOGPT

    args = dataclasses.replace(FLAVORS[flavor], conditioning="none")
    with torch.device("meta"):
        model = AOGPT(args)
    return args.get_nparams_and_flops(model, seq_len)[1]


def peak_memory_gib(device, others: int = 0) -> float | None:
    """The device's peak allocated memory since the last reset, less `others` bytes (what other
    variants hold), GiB (None on a CPU)."""
    import torch

    return round((torch.cuda.max_memory_allocated(device) - others) / 2**30, 3) if device.type == "cuda" else None


def reset_peak_memory(device) -> int:
    """Starts a peak measurement; the bytes allocated now (0 on a CPU)."""
    import torch

    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def command_line(args) -> str:
    """The command a result came from, for its docs row."""
    parts = [command_environment() + "aogpt bench train", f"--flavor {args.flavor}"]
    parts += [f"--seq-len {args.seq_len}"] if args.seq_len else []
    parts += [f"--batch {args.batch}", f"--steps {args.steps}"]
    parts += [] if args.profile else [f"--rounds {args.rounds}"]
    parts += [f"--warmup {args.warmup}", f"--variants {args.variants}"]
    parts += [] if args.loss_path == "logits" else [f"--loss-path {args.loss_path}"]
    parts += [f"--dtype {args.dtype}"] if args.dtype else []
    parts += [f"--compile {args.compile}"] if args.compile else []
    parts += [] if args.loss_chunk_rows is None else [f"--loss-chunk-rows {args.loss_chunk_rows}"]
    parts += ["--profile"] if args.profile else []
    return " ".join(parts)


def run_profile(args, built: dict, device, say) -> dict:
    import os

    from .step_profile import profile_steps

    profiles = {}
    for v, variant in built.items():
        say(f"  profiling {v}: {args.steps} steps")
        trace = None
        if args.profile_trace:
            os.makedirs(args.profile_trace, exist_ok=True)
            trace = os.path.join(args.profile_trace, f"train_{args.flavor}_{v}.json")
        profiles[v] = profile_steps(variant.step, device, args.steps, trace)
    return profiles


def run(args) -> int:
    import torch

    variants = check_args(args)
    device = resolve_device(args.device)
    dtype_name = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    seq_len = args.seq_len or FLAVORS[args.flavor].max_seq_len
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    say(f"bench train: {args.flavor} seq {seq_len} batch {args.batch} on {device_name(device)}; building {variants}")
    built = {
        name: Variant(
            args.flavor,
            *VARIANTS[split_name(name)[0]],
            seq_len,
            args.batch,
            device,
            dtype,
            args.compile,
            args.loss_chunk_rows,
            split_name(name)[1],
        )
        for name in variants
    }
    say(f"  warm-up: {args.warmup} steps per variant" + (" (compiling)" if args.compile else ""))
    for v in variants:
        for _ in range(args.warmup):
            built[v].step()
    described = {
        "command": command_line(args),
        "flavor": args.flavor,
        "seq_len": seq_len,
        "batch": args.batch,
        "device": device_name(device),
        "dtype": dtype_name,
        "compile": args.compile,
        "loss_paths": sorted({split_name(v)[1] for v in variants}, key=LOSS_PATHS.index),
        "loss_chunk_rows": built[variants[0]].loss_chunk_rows,
    }
    if args.profile:
        return report_profile({**described, "profile": run_profile(args, built, device, say)}, args.json)
    peaks: dict[str, float | None] = dict.fromkeys(variants)
    times: dict[str, list[float]] = {v: [] for v in variants}
    rounds: list[dict[str, float]] = []
    for i in range(args.rounds):
        this_round = {}
        for v in variants:
            synchronize(device)
            others = reset_peak_memory(device) - built[v].resident_bytes()  # the other variants' models
            steps = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                built[v].step()
                synchronize(device)
                steps.append(time.perf_counter() - t0)
            peak = peak_memory_gib(device, others)
            peaks[v] = peak if peaks[v] is None else max(peaks[v], peak)
            times[v] += steps
            this_round[v] = 1000 * statistics.median(steps)
        rounds.append(this_round)
        say(f"  round {i + 1}/{args.rounds}: " + "  ".join(f"{v} {ms:.2f} ms" for v, ms in this_round.items()))
    ms = {v: 1000 * statistics.median(t) for v, t in times.items()}
    tps = {v: built[v].tokens_per_step / (m / 1000) for v, m in ms.items()}
    achieved = {v: tps[v] * built[v].flops_per_token for v in variants}
    ar_equivalent = {v: tps[v] * built[v].ar_flops_per_token for v in variants}
    name = device_name(device)
    peak = next((f for key, f in BF16_PEAK_FLOPS.items() if key in name), None) if dtype_name == "bfloat16" else None
    result = {
        **described,
        "timed_steps_per_variant": args.steps * args.rounds,
        "median_step_ms": {v: round(m, 3) for v, m in ms.items()},
        "tokens_per_s": {v: round(tps[v], 1) for v in variants},
        "flops_per_token": {v: built[v].flops_per_token for v in variants},  # as executed (ModelArgs)
        "tflops": {v: round(achieved[v] / 1e12, 3) for v in variants},
        "tflops_ar_equivalent": {v: round(ar_equivalent[v] / 1e12, 3) for v in variants},  # AR's FLOPs, same tokens
        "peak_tflops": None if peak is None else round(peak / 1e12, 1),
        "mfu": None if peak is None else {v: round(achieved[v] / peak, 4) for v in variants},
        "mfu_ar_equivalent": None if peak is None else {v: round(ar_equivalent[v] / peak, 4) for v in variants},
        "peak_memory_gib": peaks if device.type == "cuda" else None,  # torch.cuda.max_memory_allocated
        "rounds": [{v: round(m, 3) for v, m in r.items()} for r in rounds],
    }
    ratios = {}  # per loss path: AO / AR, median of the per-round ratios
    for path in result["loss_paths"]:
        ao, ar = variant_name("ao", path), variant_name("ar", path)
        if ao in ms and ar in ms:
            per_round = [r[ao] / r[ar] for r in rounds]
            ratio, spread = median_and_range(per_round, digits=4)
            ratios[path] = {
                "ao_vs_ar_step_time_ratio": ratio,
                "ratio_range": spread,
                "round_ratios": [round(x, 4) for x in per_round],
                "ratio_of_median_step_ms": round(ms[ao] / ms[ar], 4),
            }
    if ratios:
        result["by_loss_path"] = ratios
        result.update(ratios[next(iter(ratios))])  # the first path's, as a one-path run has always reported
    if len(result["loss_paths"]) > 1:  # fused / logits step time per variant, median of the per-round ratios
        result["fused_vs_logits"] = {}
        for v in dict.fromkeys(split_name(name)[0] for name in variants):
            if v in ms and variant_name(v, "fused") in ms:
                per_round = [r[variant_name(v, "fused")] / r[v] for r in rounds]
                ratio, spread = median_and_range(per_round, digits=4)
                result["fused_vs_logits"][v] = {"ratio": ratio, "range": spread}
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{args.flavor} seq {seq_len} batch {args.batch} on {result['device']} ({dtype_name}, compile={args.compile})"
    )
    for v in variants:
        mfu = ""
        if result["mfu"]:
            mfu = (
                f"  MFU {100 * result['mfu'][v]:.1f}% (AR-equivalent {100 * result['mfu_ar_equivalent'][v]:.1f}%) "
                f"of {result['peak_tflops']} TFLOP/s"
            )
        memory = f"  peak {peaks[v]:.2f} GiB" if result["peak_memory_gib"] else ""
        print(
            f"  {v:9s} {ms[v]:9.2f} ms/step (median of {result['timed_steps_per_variant']} steps)  "
            f"{result['tokens_per_s'][v]:10.0f} tokens/s  {result['tflops'][v]:.3f} TFLOP/s "
            f"(AR-equivalent {result['tflops_ar_equivalent'][v]:.3f}){mfu}{memory}"
        )
    for path, r in result.get("by_loss_path", {}).items():
        lo, hi = r["ratio_range"]
        print(
            f"  AO / AR step time ({path} loss path), median of {args.rounds} per-round ratios: "
            f"{r['ao_vs_ar_step_time_ratio']:.3f} [min {lo:.3f}, max {hi:.3f}] (goal <= 1.10)"
        )
        print(
            f"    per-round ratios: {', '.join(f'{x:.3f}' for x in r['round_ratios'])}; ratio of the overall "
            f"medians above: {r['ratio_of_median_step_ms']:.3f} (the two differ when rounds disagree, i.e. "
            "the machine's speed changed during the run)"
        )
    for v, r in result.get("fused_vs_logits", {}).items():
        lo, hi = r["range"]
        print(f"  {v} fused / logits loss path step time: {r['ratio']:.3f} [min {lo:.3f}, max {hi:.3f}]")
    return 0


def report_profile(result: dict, as_json: bool) -> int:
    from .step_profile import format_profiles

    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"profile: {result['flavor']} seq {result['seq_len']} batch {result['batch']} on {result['device']} "
        f"({result['dtype']}, compile={result['compile']}, loss chunks of {result['loss_chunk_rows']} rows)"
    )
    for line in format_profiles(result["profile"]):
        print("  " + line)
    return 0
