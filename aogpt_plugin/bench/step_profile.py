"""`aogpt bench train --profile`: where one training step's time goes, by kernel category.

torch.profiler records the timed steps (each inside a `aogpt.step` range that ends after the device
synchronises). Every piece of work gets one category:

    communication     NCCL / gloo / c10d collectives
    optimizer         anything under `aogpt.optimizer` (gradient clipping, AdamW step, zero_grad)
    loss              the training cross-entropy on the logits, forward and backward (cross_entropy.ao_cross_entropy;
                      the fused path runs inside the model's forward: its GEMMs are matmul, the rest elementwise)
    attention         scaled-dot-product attention and its kernels (flash, memory-efficient, cuDNN)
    matmul            GEMMs (cuBLAS / CUTLASS / Triton templates; aten mm/addmm/bmm on a CPU)
    elementwise/norm  everything else: norms, adaLN modulation, GELU, embeddings, gathers, copies
    idle              step wall time that no work covers

On a GPU the work is the device's kernels (and copies), each categorised by its name and by the
host ops that launched it; idle is the steps' wall time minus the union of kernel intervals, so a
launch-bound step shows as idle. Kernels that overlap (another stream) are counted in their
categories and the overlap is reported, so categories - overlap + idle = wall. On a CPU the work is
each operator's self time (its time minus its children's); idle is then host time outside any
operator (Python, the autograd engine) and nothing overlaps. The LM head's matmuls count as matmul:
the loss category is the cross-entropy only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CATEGORIES = ("matmul", "attention", "loss", "elementwise/norm", "optimizer", "communication", "idle")
STEP_RANGE, LOSS_RANGE, OPTIMIZER_RANGE = "aogpt.step", "aogpt.loss", "aogpt.optimizer"

_COMMUNICATION = re.compile(r"nccl|gloo|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.I)
_OPTIMIZER = re.compile(r"^(aogpt\.optimizer|Optimizer\.(step|zero_grad)#)")
_LOSS = re.compile(r"^aogpt\.loss$|RealVocabCrossEntropy|cross_entropy|nll_loss|NllLoss", re.I)
_ATTENTION = re.compile(r"scaled_?dot_?product|flash|fmha|sdpa|attention", re.I)
_MATMUL = re.compile(
    r"gemm|xmma|nvjet|cublas|cutlass|wgmma|^sm\d+_|triton_tem_|splitk"
    r"|^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|_addmm_activation|linear)$|^mkldnn::",
    re.I,
)
# host ranges that hold no work of their own: their self time is Python or autograd-engine overhead
_NOT_WORK = re.compile(r"^(ProfilerStep#|autograd::engine::evaluate_function)")
# the profiler's kinds of device work (its `activity_type`); annotations mirrored on the device are not work
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME = re.compile(r"^cu(da)?[A-Z]")  # CUDA runtime / driver calls (cudaLaunchKernel, cuLaunchKernel)


def category_of(name: str, ancestors: Sequence[str] = ()) -> str:
    """The category of a kernel or operator `name` launched inside the host ranges `ancestors`
    (innermost first). A scope decides before a name: a GEMM inside the optimizer is optimizer."""
    chain = (name, *ancestors)
    if any(_COMMUNICATION.search(n) for n in chain):
        return "communication"
    if any(_OPTIMIZER.search(n) for n in chain):
        return "optimizer"
    if any(_LOSS.search(n) for n in chain):
        return "loss"
    if any(_ATTENTION.search(n) for n in chain):
        return "attention"
    if _MATMUL.search(name):
        return "matmul"
    return "elementwise/norm"


@dataclass(frozen=True)
class Work:
    """One piece of work: `busy_us` of `category`; device work also has its interval [start_us, end_us]."""

    name: str
    category: str
    busy_us: float
    start_us: float = 0.0
    end_us: float = 0.0


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _clip(start: float, end: float, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(start, a), min(end, b)) for a, b in windows if min(end, b) > max(start, a)]


def summarise(works: Sequence[Work], windows: Sequence[tuple[float, float]], device_timeline: bool, top: int = 3):
    """Per-step milliseconds and fractions of the steps' wall time for every category (idle included),
    the overlap of device work, and each category's `top` names. `windows` are the steps' [start, end]
    in microseconds; device work is clipped to them (CPU work already lies inside)."""
    steps = len(windows)
    wall = sum(b - a for a, b in windows)
    per_category: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    names: dict[str, Counter] = {c: Counter() for c in CATEGORIES}
    spans = []
    for w in works:
        if device_timeline:
            pieces = _clip(w.start_us, w.end_us, windows)
            busy = sum(b - a for a, b in pieces)
            spans += pieces
        else:
            busy = w.busy_us
        per_category[w.category] += busy
        names[w.category][w.name] += busy
    total = sum(per_category.values())
    covered = union_us(spans) if device_timeline else total
    per_category["idle"] = max(0.0, wall - covered)
    ms = lambda us: round(us / 1000 / steps, 4)  # noqa: E731
    return {
        "steps": steps,
        "timeline": "device kernels" if device_timeline else "cpu operators (self time)",
        "wall_ms_per_step": ms(wall),
        "busy_ms_per_step": ms(covered),
        "overlap_ms_per_step": ms(total - covered),
        "categories": {
            c: {
                "ms_per_step": ms(per_category[c]),
                "fraction": round(per_category[c] / wall, 4) if wall else 0.0,
                "top": [[n, ms(us)] for n, us in names[c].most_common(top) if us > 0],
            }
            for c in CATEGORIES
        },
    }


def _ancestors(event, loss_nodes: set[tuple[int, int]]) -> list[str]:
    """The host ranges around `event`, innermost first; a backward node of an op recorded inside
    `aogpt.loss` (same forward thread and autograd sequence number), the event itself or a range
    around it, counts as inside it too."""
    out = [LOSS_RANGE] if _in_loss_backward(event, loss_nodes) else []
    parent = event.cpu_parent
    while parent is not None:
        out.append(parent.name)
        if _in_loss_backward(parent, loss_nodes):
            out.append(LOSS_RANGE)
        parent = parent.cpu_parent
    return out


def _in_loss_backward(event, loss_nodes: set[tuple[int, int]]) -> bool:
    return event.sequence_nr >= 0 and (event.fwd_thread, event.sequence_nr) in loss_nodes


def loss_autograd_nodes(events) -> set[tuple[int, int]]:
    """(forward thread, sequence number) of every autograd op recorded inside `aogpt.loss`: their
    backward nodes carry the same pair (`fwd_thread`, `sequence_nr`), on whatever thread they run, so
    the loss's backward is found whether it is eager or compiled (`CompiledFunctionBackward`)."""
    return {
        (e.thread, e.sequence_nr)
        for e in events
        if e.sequence_nr >= 0 and e.device_type.name == "CPU" and LOSS_RANGE in _ancestors(e, set())
    }


def step_windows(events) -> list[tuple[float, float]]:
    """The steps' host ranges. On a GPU the profiler mirrors each one on the device timeline under the
    same name; counting those too made every step two overlapping windows (wall and idle averaged
    over both, kernels clipped twice)."""
    return sorted(
        (e.time_range.start, e.time_range.end) for e in events if e.name == STEP_RANGE and e.device_type.name == "CPU"
    )


def cpu_works(events) -> list[Work]:
    """Every host operator inside a step, with its self time (ranges that only group work excluded)."""
    loss_nodes = loss_autograd_nodes(events)
    works = []
    for e in events:
        if e.device_type.name != "CPU" or e.is_user_annotation or _NOT_WORK.search(e.name) or e.is_async:
            continue
        ancestors = _ancestors(e, loss_nodes)
        if STEP_RANGE not in ancestors:
            continue
        works.append(Work(e.name, category_of(e.name, ancestors), max(0.0, e.self_cpu_time_total)))
    return works


def _method(event, name: str, default=None):
    fn = getattr(event, name, None)
    return default if fn is None else fn()


def device_works(events, kineto_events, trace_start_ns: int) -> list[Work]:
    """Every device kernel / copy, categorised by its name and by the host op that launched it, with
    that op's enclosing ranges. The profiler's raw events carry the link (a device event's
    `linked_correlation_id` is the launching op's `correlation_id`, as torch's own parser reads it);
    `events` (torch's FunctionEvents, id = correlation id) carry the tree of host ranges."""
    loss_nodes = loss_autograd_nodes(events)
    frontend = {
        k.correlation_id() for k in kineto_events if k.device_type().name == "CPU" and k.linked_correlation_id() == 0
    }
    hosts = {
        e.id: e
        for e in events
        if e.device_type.name == "CPU" and e.id in frontend and not e.is_async and not _RUNTIME.search(e.name)
    }
    annotations = {e.name for e in events if e.is_user_annotation}  # host ranges the device timeline mirrors
    works = []
    for k in kineto_events:
        if k.device_type().name == "CPU" or not _is_device_work(k, annotations):
            continue
        host = hosts.get(k.linked_correlation_id())
        ancestors = [] if host is None else [host.name, *_ancestors(host, loss_nodes)]
        start, end = (k.start_ns() - trace_start_ns) / 1000, (k.end_ns() - trace_start_ns) / 1000
        works.append(Work(k.name(), category_of(k.name(), ancestors), end - start, start, end))
    return works


def _is_device_work(kineto_event, annotations: set[str]) -> bool:
    kind = _method(kineto_event, "activity_type")  # torch >= 2.13; before it, mirrored ranges go by name
    if kind:
        return kind in DEVICE_WORK
    return not _method(kineto_event, "is_user_annotation", False) and kineto_event.name() not in annotations


def profile_steps(step, device, steps: int, trace_path: str | None = None) -> dict:
    """Run `step()` `steps` times under torch.profiler and summarise by category (see the module doc)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from ..devices import synchronize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function(STEP_RANGE):
                step()
                synchronize(device)
    if trace_path:
        prof.export_chrome_trace(trace_path)
    events = prof.events()
    on_device = device.type == "cuda"
    if on_device:
        raw = prof.profiler.kineto_results
        works = device_works(events, raw.events(), raw.trace_start_ns())
    else:
        works = cpu_works(events)
    summary = summarise(works, step_windows(events), device_timeline=on_device)
    if on_device:
        summary["device"] = torch.cuda.get_device_name(device)
    return summary


def format_profiles(profiles: dict[str, dict]) -> list[str]:
    """The per-category table, one column pair per variant, then each category's heaviest names."""
    variants = list(profiles)
    lines = [f"{'category':18s}" + "".join(f"{v + ' ms/step':>16s}{'%':>7s}" for v in variants)]
    for c in CATEGORIES:
        cells = "".join(
            f"{profiles[v]['categories'][c]['ms_per_step']:16.3f}{100 * profiles[v]['categories'][c]['fraction']:6.1f}%"
            for v in variants
        )
        lines.append(f"{c:18s}{cells}")
    lines.append(f"{'overlap':18s}" + "".join(f"{profiles[v]['overlap_ms_per_step']:16.3f}{'':7s}" for v in variants))
    lines.append(f"{'step (wall)':18s}" + "".join(f"{profiles[v]['wall_ms_per_step']:16.3f}{'':7s}" for v in variants))
    for v in variants:
        lines.append(f"heaviest in {v} ({profiles[v]['timeline']}), ms/step:")
        for c in CATEGORIES[:-1]:
            top = profiles[v]["categories"][c]["top"]
            if top:
                lines.append(f"  {c:16s} " + "; ".join(f"{name[:70]} {ms:.3f}" for name, ms in top))
    return [line.rstrip() for line in lines]
