"""`aogpt bench {train,sampler,requests,serve}`: benchmarks and the baselines they time (they measure; tests assert).

    train_step.py     AO-GPT vs plain AR training step time (forward + backward + AdamW)
    sampler_speed.py  the cached AO sampler vs the encoder-only MDM and AR decode, interleaved rounds
    batched_requests.py  mixed requests (prompts, infill spans, lengths, seeds) one at a time vs in batches
    serve_load.py     `aogpt serve` under Poisson load from concurrent clients: continuous vs fixed batching
    baselines.py      the encoder-only masked-diffusion model (bidirectional, no cache) and plain
                      KV-cache autoregressive decoding of the AO-GPT backbone

Each command prints its result (`--json`: one object); `scripts/update_benchmarks_doc.py` turns that
JSON into rows of docs/benchmarks.md. The package itself never writes repository files.
"""

from __future__ import annotations

import importlib

BENCH_MODULES = (
    "aogpt_plugin.bench.train_step",
    "aogpt_plugin.bench.sampler_speed",
    "aogpt_plugin.bench.batched_requests",
    "aogpt_plugin.bench.serve_load",
)


def median_and_range(values: list[float], digits: int = 3) -> tuple[float, list[float]]:
    """A per-round quantity as every bench reports it: the median over rounds and its [min, max]."""
    import statistics

    return round(statistics.median(values), digits), [round(min(values), digits), round(max(values), digits)]


# inductor's environment settings that change which kernels a compiled step runs (not where it caches them)
KERNEL_CHOICE_ENV = (
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM",
    "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE",
    "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING",
)


def command_environment() -> str:
    """The kernel-choosing settings set in the environment, as a command's prefix ("" when none): a row
    measured with `TORCHINDUCTOR_MAX_AUTOTUNE=1` names it, and is not its plain twin."""
    import os

    return "".join(f"{name}={os.environ[name]} " for name in KERNEL_CHOICE_ENV if os.environ.get(name))


def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="measure training step time (AO vs AR), sampler speed, batched requests, or the server"
    )
    sub = p.add_subparsers(dest="bench_command", required=True, metavar="{train,sampler,requests,serve}")
    for name in BENCH_MODULES:
        importlib.import_module(name).add_to(sub)
