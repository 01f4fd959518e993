"""`aogpt bench {train,sampler}`: benchmarks that measure and report ratios from one run (never tests)."""

from __future__ import annotations

import importlib

BENCH_MODULES = (
    "aogpt_plugin.train_bench",
    "aogpt_plugin.sampler.bench_command",
)


def add_to(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure training step time (AO vs AR) or sampler speed")
    sub = p.add_subparsers(dest="bench_command", required=True, metavar="{train,sampler}")
    for name in BENCH_MODULES:
        importlib.import_module(name).add_to(sub)
