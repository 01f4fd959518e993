"""Add `aogpt bench sampler/train/requests --json` results to the tables of docs/benchmarks.md.

    aogpt bench sampler --flavor small --n 256 --repeats 3 --json > run.json
    python scripts/update_benchmarks_doc.py run.json [more.json ...] [--docs docs/benchmarks.md]

A run with a speculative variant (`--model OUT_DIR --speculative K|auto`) goes to the speculative
table, a run with static steps (`--graphs on|compile|static`) to the graphed table, any other sampler
run to the sampler table; `aogpt bench train` runs go to the training step-time table, `aogpt bench
train --profile` runs to the step-profile table, `aogpt bench requests` runs to the batched-requests table.
Each table sits between two HTML-comment markers. Only the text between them is ours: a result
replaces the row of the same date, command and device, or is appended; everything outside the markers
is kept byte for byte. (The package never writes repository files; this script does.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

from aogpt_plugin.bench.step_profile import CATEGORIES as PROFILE_CATEGORIES

START, END = "<!-- sampler-bench:start -->", "<!-- sampler-bench:end -->"
DEFAULT_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks.md")

INTRO = """## Sampler speed (`aogpt bench sampler`)

Wall-clock seconds for one batch, random weights, one warm-up run first. AO = AO-GPT with the cached
any-order sampler; encoder = bidirectional MDM of the same width/depth (T full-sequence forwards,
no cache; rows with `encoder_timed_forwards` in their JSON time its first 16 forwards a round, times T's
forwards: a forward is the same work at every T); AR = plain causal GPT of the same backbone with KV-cache
decoding (n forwards).
With `--repeats R` every round times each variant once, in turn: seconds are medians over the R
rounds, and a ratio is the median of its R per-round ratios with their [min, max] after it.
Goals (issue 3, not asserted): encoder/AO at T=n >= 40x on CPU (small, n=256); on a GPU >= 25x at
n=1024, batch 32 (issue 33: the bound in the section above); AO(T=n)/AR <= 1.15; AR/AO(T=n/4) >= 3.
A row is added with
`aogpt bench sampler ... --json > run.json && python scripts/update_benchmarks_doc.py run.json`.
"""

COLUMNS = (
    "date",
    "command",
    "device",
    "flavor",
    "n",
    "batch",
    "dtype, Linear kernels",
    "AO s (T=n, n/4, n/16)",
    "encoder s (T=n, n/4, n/16)",
    "AR s",
    "forwards AO / enc / AR",
    "encoder/AO at T=n",
    "AO(T=n)/AR",
    "AR/AO(T=n/4)",
)


def ratio_cell(result: dict, key: str, fmt: str) -> str:
    """'2.94x', or '2.94x [2.80x, 3.05x]' (median [min, max] of the per-round ratios) for several rounds."""
    cell = fmt.format(result[key])
    lo_hi = result.get("ratio_range", {}).get(key)
    if result.get("repeats", 1) > 1 and lo_hi:
        cell += " [" + ", ".join(fmt.format(v) for v in lo_hi) + "]"
    return cell


def format_row(result: dict) -> str:
    steps = [str(t) for t in result["steps"]]
    encoder, ar = result.get("encoder_seconds"), result.get("ar_seconds")
    optional = lambda key, fmt: ratio_cell(result, key, fmt) if key in result else "-"  # noqa: E731
    cells = [
        datetime.date.today().isoformat(),
        f"`{result['command']}`",
        result["device"],
        result["flavor"],
        str(result["n"]),
        str(result["batch"]),
        f"{result['dtype']}, {result['linears']} linears" if "linears" in result else result["dtype"],
        ", ".join(f"{result['ao_seconds'][t]:.3f}" for t in steps),
        ", ".join(f"{encoder[t]:.3f}" for t in steps) if encoder else "-",
        f"{ar:.3f}" if ar is not None else "-",
        " / ".join(
            [
                ",".join(str(result["ao_forward_passes"][t]) for t in steps),
                ",".join(str(result["encoder_forward_passes"][t]) for t in steps) if encoder else "-",
                str(result.get("ar_forward_passes", "-")),
            ]
        ),
        optional("ao_vs_encoder_speedup", "{:.2f}x"),
        optional("ao_vs_ar_time_ratio", "{:.3f}"),
        optional("ao_quarter_vs_ar_speedup", "{:.2f}x"),
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


SPEC_START, SPEC_END = "<!-- speculative-bench:start -->", "<!-- speculative-bench:end -->"
SPEC_INTRO = """## Speculative sampling (`aogpt bench sampler --model MODEL_DIR --speculative K|auto`)

Exact any-order speculative sampling (`speculative_generate`, its rounds in `aogpt_plugin/sampler/speculative.py`) draws the T=n
distribution, so it is timed against T=n sequential sampling and against AR decoding of the same
trained weights (left to right); its forward passes depend on how often the model's parallel drafts
are accepted, which needs trained weights. Medians of the rounds; ratios as above.
"""
SPEC_COLUMNS = (
    "date",
    "command",
    "device",
    "n",
    "batch",
    "AO s (T=n, n/4)",
    "speculative s",
    "AR s",
    "forwards T=n / spec / AR",
    "spec forwards per token",
    "T=n / spec",
    "spec / AR",
)


def format_spec_row(result: dict) -> str:
    n, quarter = str(result["n"]), str(max(1, result["n"] // 4))
    cells = [
        datetime.date.today().isoformat(),
        f"`{result['command']}`",
        result["device"],
        n,
        str(result["batch"]),
        f"{result['ao_seconds'][n]:.3f}, {result['ao_seconds'][quarter]:.3f}",
        f"{result['spec_seconds']:.3f}",
        f"{result['ar_seconds']:.3f}",
        f"{result['ao_forward_passes'][n]} / {result['spec_forward_passes']} / {result['ar_forward_passes']}",
        f"{result['spec_forwards_per_token']:.3f}",
        ratio_cell(result, "spec_vs_sequential_speedup", "{:.2f}x"),
        ratio_cell(result, "spec_vs_ar_time_ratio", "{:.3f}"),
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


GRAPH_START, GRAPH_END = "<!-- graphed-sampler-bench:start -->", "<!-- graphed-sampler-bench:end -->"
GRAPH_INTRO = """## Sampler speed, static steps replayed from CUDA graphs (`aogpt bench sampler --graphs on|compile`)

The same three samplers with every decode step at fixed shapes over fixed buffers (`aogpt_plugin/sampler/static.py`),
captured once per step shape and replayed (`on`: the eager step; `compile`: inductor's, then captured); AR
is the AO sampler's static step at T=n in left-to-right order on the plain GPT. Per-forward times are the
median seconds of a variant over its forward passes. Seconds, ratios and rounds as in the table above.
Goals (issue 33, not asserted): the AO `small` T=n step <= 0.5 ms at n=1024, batch 1; encoder/AO at T=n
>= 25x at n=1024, batch 32; AO(T=n)/AR <= 1.15; AR/AO(T=n/4) >= 3x.
"""
GRAPH_COLUMNS = (
    "date",
    "command",
    "device",
    "flavor",
    "n",
    "batch",
    "dtype, graphs, decode attention",
    "ms per forward: AO T=n / encoder T=n / AR",
    "AO s (T=n, n/4, n/16)",
    "encoder s (T=n, n/4, n/16)",
    "AR s",
    "encoder/AO at T=n",
    "AO(T=n)/AR",
    "AR/AO(T=n/4)",
)


def format_graph_row(result: dict) -> str:
    steps, n = [str(t) for t in result["steps"]], result["n"]
    per_forward = result["ms_per_forward"]
    timed = lambda key: f"{per_forward[key]:.3f}" if key in per_forward else "-"
    optional = lambda key, fmt: ratio_cell(result, key, fmt) if key in result else "-"
    encoder = result.get("encoder_seconds")
    cells = [
        datetime.date.today().isoformat(),
        f"`{result['command']}`",
        result["device"],
        result["flavor"],
        str(n),
        str(result["batch"]),
        ", ".join([result["dtype"], result["graphs"], *filter(None, [result.get("decode_attention")])]),
        f"{timed(f'ao {n}')} / {timed(f'encoder {n}')} / {timed('ar')}",
        ", ".join(f"{result['ao_seconds'][t]:.3f}" for t in steps),
        ", ".join(f"{encoder[t]:.3f}" for t in steps) if encoder else "-",
        f"{result['ar_seconds']:.3f}" if "ar_seconds" in result else "-",
        optional("ao_vs_encoder_speedup", "{:.2f}x"),
        optional("ao_vs_ar_time_ratio", "{:.3f}"),
        optional("ao_quarter_vs_ar_speedup", "{:.2f}x"),
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


TRAIN_START, TRAIN_END = "<!-- train-rows:start -->", "<!-- train-rows:end -->"
TRAIN_INTRO = """### Training step time rows (`aogpt bench train --json`)

AO vs AR of the same backbone, interleaved rounds; step times are medians, the ratio is the median of
the per-round ratios [min, max]; MFU counts the FLOPs each variant executes against the device's dense
bf16 peak (GPUs only), and AO's AR-equivalent MFU (AR's FLOPs for the same tokens, docs/training.md) in
brackets; peak memory is torch.cuda.max_memory_allocated during a variant's timed steps less what the
other variants hold (their weights, optimizer state and batch): the variant's own footprint. A run of
several loss paths (`--loss-path logits,fused`) gives a row per path, all timed in the same rounds.
"""
TRAIN_COLUMNS = (
    "date",
    "command",
    "device",
    "dtype, compile",
    "AR ms/step",
    "AO ms/step",
    "AR / AO tokens/s",
    "MFU AR / AO",
    "peak GiB AR / AO",
    "AO / AR",
)


def _pair(values: dict | None, fmt: str, names: tuple[str, str] = ("ar", "ao")) -> str:
    if not values:
        return "-"
    return " / ".join(fmt.format(values[v]) if values.get(v) is not None else "-" for v in names)


def format_train_row(result: dict) -> str:
    """One row per loss path of the run (lines of one string): `ao` is the logits path's, `ao+fused` the fused's."""
    rows = []
    for path in result.get("loss_paths", ["logits"]):
        ar, ao = ("ar", "ao") if path == "logits" else (f"ar+{path}", f"ao+{path}")
        ms = result["median_step_ms"]
        ratios = result.get("by_loss_path", {}).get(path) or (result if path == "logits" else {})
        ratio = "-"
        if "ao_vs_ar_step_time_ratio" in ratios:
            lo, hi = ratios["ratio_range"]
            ratio = f"{ratios['ao_vs_ar_step_time_ratio']:.3f} [{lo:.3f}, {hi:.3f}]"
        mfu = _pair({v: 100 * m for v, m in (result["mfu"] or {}).items()}, "{:.1f}%", (ar, ao))
        ar_equivalent = (result.get("mfu_ar_equivalent") or {}).get(ao)
        if ar_equivalent is not None:
            mfu += f" (AR-eq. {100 * ar_equivalent:.1f}%)"
        cells = [
            datetime.date.today().isoformat(),
            f"`{result['command']}`",
            result["device"],
            f"{result['dtype']}, {result['compile'] or 'eager'}" + ("" if path == "logits" else f", {path} loss"),
            f"{ms[ar]:.2f}" if ar in ms else "-",
            f"{ms[ao]:.2f}" if ao in ms else "-",
            _pair(result["tokens_per_s"], "{:,.0f}", (ar, ao)),
            mfu,
            _pair(result.get("peak_memory_gib"), "{:.2f}", (ar, ao)),
            ratio,
        ]
        rows.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(rows)


PROFILE_START, PROFILE_END = "<!-- train-profile:start -->", "<!-- train-profile:end -->"
PROFILE_INTRO = """### Training step profile rows (`aogpt bench train --profile --json`)

Each cell: the category's share of the step's wall time, per variant (as in the variants column).
On a GPU the work is the device's kernels and idle is wall time no kernel covers; on a CPU the work is
each operator's self time and idle is host time outside operators (aogpt_plugin/bench/step_profile.py).
"""
PROFILE_COLUMNS = ("date", "command", "device", "variants", "wall ms/step", *PROFILE_CATEGORIES)


def format_profile_row(result: dict) -> str:
    profiles = result["profile"]
    variants = list(profiles)
    cells = [
        datetime.date.today().isoformat(),
        f"`{result['command']}`",
        result["device"],
        " / ".join(variants),
        " / ".join(f"{profiles[v]['wall_ms_per_step']:.2f}" for v in variants),
        *(
            " / ".join(f"{100 * profiles[v]['categories'][c]['fraction']:.1f}%" for v in variants)
            for c in PROFILE_CATEGORIES
        ),
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


REQUESTS_START, REQUESTS_END = "<!-- requests-bench:start -->", "<!-- requests-bench:end -->"
REQUESTS_INTRO = """## Batched requests (`aogpt bench requests`)

Many requests, each with its own prompt or infill spans, length and seed (a third with a prompt of 4 to n/4
tokens, a third with two infill spans of 2 to 6 tokens, a third with nothing; lengths n/2 to n; T = one step
per generated token), sampled one at a time and in batches through `aogpt sample --requests`'s path
(`sample_batches`). Tokens/s: generated tokens over the sampling seconds of all requests (a compile of the
static step excluded), the median over rounds; the ratio is a batch size's over one-at-a-time's, the median
of the per-round ratios [min, max]. The last column says whether every batch size gave every request the
same tokens (batch invariance). A row is added with
`aogpt bench requests ... --json > run.json && python scripts/update_benchmarks_doc.py run.json`.
"""
REQUESTS_COLUMNS = ("date", "command", "device", "model", "requests, n", "dtype, graphs", "tokens/s by batch size", "x one at a time", "same tokens")  # fmt: skip


def format_requests_row(result: dict) -> str:
    sizes = [str(s) for s in result["batch_sizes"]]
    speed = ", ".join(f"{s}: {result['tokens_per_second'][s]:,.1f}" for s in sizes)
    ratios = []
    for s in sizes[1:]:
        cell = f"{s}: {result['speedup_vs_first'][s]:.2f}x"
        lo, hi = result["speedup_range"][s]
        if result.get("repeats", 1) > 1:
            cell += f" [{lo:.2f}x, {hi:.2f}x]"
        ratios.append(cell)
    cells = [
        datetime.date.today().isoformat(),
        f"`{result['command']}`",
        result["device"],
        result["model"],
        f"{result['requests']}, {result['n']}",
        f"{result['dtype']}, {result['graphs']}",
        speed,
        "; ".join(ratios) or "-",
        "yes" if result["same_tokens_at_every_batch_size"] else "NO",
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def section_of(result: dict) -> tuple[str, str, str, tuple, object]:
    """(start marker, end marker, intro, columns, row formatter) of the table this result belongs to."""
    if "profile" in result:
        return PROFILE_START, PROFILE_END, PROFILE_INTRO, PROFILE_COLUMNS, format_profile_row
    if "batch_sizes" in result:
        return REQUESTS_START, REQUESTS_END, REQUESTS_INTRO, REQUESTS_COLUMNS, format_requests_row
    if "median_step_ms" in result:
        return TRAIN_START, TRAIN_END, TRAIN_INTRO, TRAIN_COLUMNS, format_train_row
    if "spec_seconds" in result:
        return SPEC_START, SPEC_END, SPEC_INTRO, SPEC_COLUMNS, format_spec_row
    if result.get("graphs", "off") != "off":
        return GRAPH_START, GRAPH_END, GRAPH_INTRO, GRAPH_COLUMNS, format_graph_row
    return START, END, INTRO, COLUMNS, format_row


def _key(row: str) -> tuple[str, str, str]:
    """A row's date, command and device: a run replaces its twin of the same day only, so each day's
    rows stay and a change's gain shows against the earlier ones."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return (cells[0], cells[1], cells[2]) if len(cells) > 2 else ("", "", "")


def render_section(rows: list[str], section=None) -> str:
    start_marker, end_marker, intro, columns, _ = section or (START, END, INTRO, COLUMNS, format_row)
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return "\n".join([start_marker, intro, header, rule, *rows, end_marker])


def update_text(text: str, result: dict) -> str:
    """`text` with this run's rows (a training run: one per loss path) added to (or replacing their same-day
    twins in) the marked section."""
    section = section_of(result)
    start_marker, end_marker, *_, formatter = section
    new_rows = formatter(result).split("\n")
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return text + sep + render_section(new_rows, section) + "\n"
    body = text[start + len(start_marker) : end]
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| date |")]
    rows = [r for r in rows if _key(r) not in {_key(new) for new in new_rows}] + new_rows
    return text[:start] + render_section(rows, section) + text[end + len(end_marker) :]


def write_rows(path: str, result: dict) -> None:
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = "# Benchmarks\n\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(update_text(text, result))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="add `aogpt bench sampler/train/requests --json` results to docs/benchmarks.md"
    )
    p.add_argument(
        "results", nargs="+", help="JSON files written by `aogpt bench sampler/train/requests --json` (- for stdin)"
    )
    p.add_argument("--docs", default=DEFAULT_DOCS, help="the markdown file (default docs/benchmarks.md)")
    args = p.parse_args(argv)
    for name in args.results:
        try:
            text = sys.stdin.read() if name == "-" else open(name, encoding="utf-8").read()
            result = json.loads(text.strip().splitlines()[-1])
            if not isinstance(result, dict):
                raise ValueError(f"its last line holds a JSON {type(result).__name__}, not an object")
            section_of(result)[-1](result)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            print(
                f"error: {name!r} is not an `aogpt bench sampler/train/requests --json` result ({type(e).__name__}: {e})",
                file=sys.stderr,
            )
            return 2
        write_rows(args.docs, result)
        print(f"{os.path.relpath(args.docs)}: row for `{result['command']}` on {result['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
