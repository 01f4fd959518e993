"""`aogpt bench sampler --step-profile FILE`: the kernels of the AO sampler's decode step, as the static
sampler runs it (on a GPU: replayed from its CUDA graph), one kernel name a row.

Why: a bench row says how long a generation took; when it falls short of its goal, this says why
without another GPU run: how many kernels a step launches, which ones take the time, and how much
of a step's wall time the device sits idle (the launch gap a CUDA graph should close).

The profiled steps are forwards `first` .. `first + count - 1` of a real `generate` run at the config's
T (the middle of it, so the cache is half full): torch.profiler starts after forward `first - 1`
returns and stops after forward `first + count - 1` and a device synchronisation, so the window holds
exactly `count` replayed steps. Every figure is per step: device kernels and copies on a GPU (their
union is busy time, the rest of the window idle), each operator's self time on a CPU.
"""

from __future__ import annotations

import time
from collections import defaultdict

from ..devices import synchronize
from .step_profile import STEP_RANGE, cpu_works, device_works, step_windows, union_us


def profile_decode_steps(model, config, choices, forwards: int, count: int = 8) -> dict:
    """Profile `count` decode steps from the middle of `generate(model, config)` with `choices` (resolved;
    a static graphs mode, its shapes already warm: the bench's rounds ran them) and summarise them per kernel.
    `forwards`: the run's forward passes, as the bench's rounds counted them (seeded: the same run), at
    least two (a step before the window)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from ..sampler.generation import generate
    from ..sampler.static import static_decoder

    device = model.tok_embeddings.weight.device
    state = static_decoder(
        model, config.num_samples, choices.backend, choices.linears, choices.graphs, choices.decode_attention
    )
    if forwards < 2:
        raise ValueError(f"a step profile needs two forwards or more; T={config.steps} runs {forwards}")
    count = max(1, min(count, forwards - 1))
    first = max(1, (forwards - count) // 2)
    on_device = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    prof = profile(activities=activities)
    runner, calls, window = state.decode_runner, [0], {}

    def counted(*args):
        k = calls[0]
        calls[0] += 1
        out = runner(*args)
        if k == first - 1:
            synchronize(device)
            prof.start()
            window["range"] = record_function(STEP_RANGE).__enter__()
            window["start"] = time.perf_counter()
        elif k == first + count - 1:
            window["host_us"] = (time.perf_counter() - window["start"]) * 1e6  # enqueue time of the steps
            synchronize(device)
            window["range"].__exit__(None, None, None)
            prof.stop()
        return out

    state.decode_runner = counted
    try:
        generate(model, config, choices=choices)
    finally:
        state.decode_runner = runner
    events = prof.events()
    if on_device:
        raw = prof.profiler.kineto_results
        works = device_works(events, raw.events(), raw.trace_start_ns())
    else:
        works = cpu_works(events)
    summary = summarise_kernels(works, step_windows(events), count, device_timeline=on_device)
    summary.update(
        T=config.steps,
        first_step=first,
        host_us_per_step=round(window["host_us"] / count, 2),
        device=torch.cuda.get_device_name(device) if on_device else "cpu",
    )
    return summary


def summarise_kernels(works, windows, steps: int, device_timeline: bool) -> dict:
    """Per step: wall, busy (the union of the device work inside the window; on a CPU the operators'
    summed self time) and idle microseconds, launches, and one row per kernel name, heaviest first."""
    (start, end), per_step = windows[0], lambda us: round(us / steps, 2)  # noqa: E731
    rows: dict[str, list] = defaultdict(lambda: [0, 0.0, ""])  # name -> [launches, us, category]
    spans = []
    for w in works:
        if device_timeline:
            if w.end_us <= start or w.start_us >= end:
                continue
            busy = min(w.end_us, end) - max(w.start_us, start)
            spans.append((max(w.start_us, start), min(w.end_us, end)))
        else:
            busy = w.busy_us
        row = rows[w.name]
        row[0] += 1
        row[1] += busy
        row[2] = w.category
    total = sum(r[1] for r in rows.values())
    busy = union_us(spans) if device_timeline else total
    kernels = [
        {
            "name": name,
            "category": category,
            "launches_per_step": round(launches / steps, 2),
            "us_per_step": per_step(us),
            "us_per_launch": round(us / launches, 2),
            "fraction_of_busy": round(us / total, 4) if total else 0.0,
        }
        for name, (launches, us, category) in sorted(rows.items(), key=lambda kv: -kv[1][1])
    ]
    return {
        "steps": steps,
        "timeline": "device kernels" if device_timeline else "cpu operators (self time)",
        "wall_us_per_step": per_step(end - start),
        "busy_us_per_step": per_step(busy),
        "idle_us_per_step": per_step(max(0.0, (end - start) - busy)),
        "launches_per_step": round(sum(r[0] for r in rows.values()) / steps, 2),
        "kernels": kernels,
    }


def format_kernels(summary: dict, top: int = 25) -> list[str]:
    """The profile as text: the per-step totals, then the heaviest `top` kernels."""
    lines = [
        f"{summary['timeline']} of {summary['steps']} steps from step {summary['first_step']} at T={summary['T']} "
        f"on {summary['device']}: "
        f"per step wall {summary['wall_us_per_step']:.1f} us, busy {summary['busy_us_per_step']:.1f} us, "
        f"idle {summary['idle_us_per_step']:.1f} us, host enqueue {summary['host_us_per_step']:.1f} us, "
        f"{summary['launches_per_step']:g} launches",
        f"{'us/step':>9s} {'launches':>8s} {'us/launch':>9s} {'%busy':>6s}  {'category':16s} kernel",
    ]
    for k in summary["kernels"][:top]:
        lines.append(
            f"{k['us_per_step']:9.2f} {k['launches_per_step']:8g} {k['us_per_launch']:9.2f} "
            f"{100 * k['fraction_of_busy']:6.1f}  {k['category']:16s} {k['name'][:100]}"
        )
    if len(summary["kernels"]) > top:
        rest = summary["kernels"][top:]
        lines.append(
            f"{sum(k['us_per_step'] for k in rest):9.2f} {sum(k['launches_per_step'] for k in rest):8g} "
            f"{'':9s} {'':6s}  {'':16s} ({len(rest)} more kernels)"
        )
    return lines
