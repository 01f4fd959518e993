"""Start from GPT-2, at CPU scale: AO-GPT trained from a GPT-2 vs from scratch (the same backbone), with and
without the left-to-right curriculum, three seeds each (docs/findings.md, "Starting from GPT-2").

    python scripts/gpt2_start_study.py                  # the study (cached in outputs/gpt2_study; its time: docs/findings.md)
    python scripts/gpt2_start_study.py --smoke --out /tmp/g --docs /tmp/g/findings.md   # a pipeline check

A tiny GPT-2 trained by transformers' GPT2LMHeadModel (scripts/make_gpt2_standin.py: aogpt's `gpt2-tiny`
shapes, the findings study's 1024-token BPE, Wikipedia training shards) stands in for a real one. Every
run trains `train_configs/aogpt_tiny_from_gpt2.toml` for the same steps on the same tokens (orders:
90% random, 10% left to right), through the real stack (`python -m aogpt_plugin.train`, `aogpt convert`,
`aogpt eval ppl`, `aogpt sample`); the variants differ only in where the weights start
(`--checkpoint.initial_load_path` the GPT-2, or `--checkpoint.no-initial_load_in_hf`) and in
`--aogpt.l2r_curriculum_steps` (150 or 0). Measured: the validation losses (held-out Wikipedia, EMA
weights) in a random and in the left-to-right order at every validation step; WikiText-2 (test)
perplexity of the final EMA weights in both readings; an infill. Verdicts by the 2-SE rule of
aogpt_plugin/eval/verdicts.py ("better" only beyond 2 standard errors). Training never reads an
evaluation set: the stand-in and the runs read the training shards, validation the held-out file.

Stages, each cached under --out (a second invocation reuses finished work; an interrupted run resumes
from its checkpoint): tokenizer, stand-in, runs (two side by side, one thread each), conversion and
evaluation, infill, report (a block of --docs between `<!-- kept: gpt2_start_study -->` and
`<!-- end kept -->`, which scripts/findings_report.py carries over when it rewrites the rest; plots in
the folder `findings/` beside it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aogpt_plugin.eval.verdicts import INCONCLUSIVE, REPRODUCED, Measurement, difference, measure, verdict  # noqa: E402

TRAIN_GLOB = "../shared/data/train_corpus/enwiki2015_train_*.jsonl"
TOKENIZER = "outputs/study/tokenizer.json"  # the findings study's, by the same command
TOKENIZER_COMMAND = [
    "aogpt",
    "tokenizer",
    "train",
    TRAIN_GLOB,
    TOKENIZER,
    "--vocab-size",
    "1024",
    "--max-bytes",
    "5000000",
]
RECIPE = "train_configs/aogpt_tiny_from_gpt2.toml"
CURRICULUM_STEPS = 150  # the recipe's
# variant: (from the stand-in GPT-2, with the curriculum, what it is)
VARIANTS = {
    "scratch": (False, False, "from scratch (the recipe's random init), no curriculum"),
    "scratch_curriculum": (False, True, "from scratch, left-to-right share 1.0 -> 0.1 over 150 steps"),
    "gpt2": (True, False, "from the stand-in GPT-2 (adaLN at the identity), no curriculum"),
    "gpt2_curriculum": (True, True, "from the stand-in GPT-2, left-to-right share 1.0 -> 0.1 over 150 steps"),
}
SEEDS = (0, 1, 2)
FULL = {"standin_steps": 1200, "steps": None, "chunks": 256, "seeds": SEEDS}  # steps None: the recipe's (400)
SMOKE = {"standin_steps": 10, "steps": 4, "chunks": 4, "seeds": (0, 1)}
SEQ_LEN = 64  # WikiText-2 chunks: the recipe's window
INFILL = {"length": 48, "keep": 16}  # the first and the last 16 tokens of a WikiText-2 chunk given, 16 filled
L2R, RANDOM = "validation_metrics/loss_l2r_ema", "validation_metrics/loss_ao_ema"
GAIN = (
    "validation_metrics/context_gain_ema"  # NLL reading another window's tokens minus reading its own: 0 on the plateau
)


def log(msg: str) -> None:
    print(f"[gpt2 study {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_command(cmd: list[str], logfile: Path | None = None, threads: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    env.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "data" / "tiktoken_cache"))
    env.setdefault("AOGPT_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if logfile is not None:
        logfile.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"error: `{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def aogpt(*args: str) -> list[str]:
    return [sys.executable, "-m", "aogpt_plugin.cli", *args]


# ---- stages ----------------------------------------------------------------------------------------------
def stand_in(out: Path, plan: dict) -> tuple[Path, list[str]]:
    folder = out / "standin"
    cmd = [sys.executable, "scripts/make_gpt2_standin.py", str(folder), "--tokenizer", TOKENIZER]
    cmd += ["--steps", str(plan["standin_steps"]), "--force"]
    if not (folder / "standin.json").exists():
        log(f"stand-in GPT-2: {' '.join(cmd[1:])}")
        run_command(cmd, out / "standin.log")
    return folder, cmd


def run_name(variant: str, seed: int) -> str:
    return f"{variant}_s{seed}"


def train_command(out: Path, variant: str, seed: int, plan: dict) -> list[str]:
    from_gpt2, curriculum, _ = VARIANTS[variant]
    cmd = [
        "-m",
        "aogpt_plugin.train",
        "--job.config_file",
        RECIPE,
        "--job.dump_folder",
        str(out / run_name(variant, seed)),
    ]
    cmd += ["--debug.seed", str(seed), "--aogpt.order_seed", str(seed)]
    cmd += (
        ["--checkpoint.initial_load_path", str(out / "standin")]
        if from_gpt2
        else ["--checkpoint.no-initial_load_in_hf"]
    )
    if not curriculum:
        cmd += ["--aogpt.l2r_curriculum_steps", "0"]
    if plan["steps"] is not None:  # smoke: a few steps, validation and checkpoint at the end
        steps = plan["steps"]
        cmd += ["--training.steps", str(steps), "--validation.freq", "2", "--checkpoint.interval", str(steps)]
        cmd += ["--metrics.log_freq", "1"] + (["--aogpt.l2r_curriculum_steps", "2"] if curriculum else [])
    return [sys.executable, *cmd]


def train(out: Path, variant: str, seed: int, plan: dict) -> dict:
    """One run, cached: its folder holds `done.json` (the command, the seconds) once it finished."""
    name, cmd = run_name(variant, seed), train_command(out, variant, seed, plan)
    folder, done = out / name, out / name / "done.json"
    if done.exists():
        record = json.loads(done.read_text())
        if record["command"] == cmd[1:]:
            return record
        log(f"{name}: its command changed since it was trained; training it again")
        shutil.rmtree(folder)
    log(f"train {name}")
    start = time.time()
    folder.mkdir(parents=True, exist_ok=True)
    run_command(cmd, folder.with_suffix(".log"))
    record = {"command": cmd[1:], "seconds": round(time.time() - start, 1)}
    done.write_text(json.dumps(record))
    return record


def scalars(folder: Path, tag: str) -> dict[int, float]:
    """{step: value} of a TensorBoard scalar over the run's event folders."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = {}
    for events in sorted((folder / "tb").iterdir()):
        acc = EventAccumulator(str(events))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            values |= {e.step: e.value for e in acc.Scalars(tag)}
    return values


def evaluate(model: Path, order: str, chunks: int) -> dict:
    """`aogpt eval ppl` on WikiText-2 (test), cached beside the model."""
    cache = model.parent / f"{model.name}.wikitext2_{order}.json"
    if not cache.exists():
        cmd = aogpt("eval", "ppl", "--model", str(model), "--dataset", "wikitext2", "--order", order)
        cmd += ["--seq-len", str(SEQ_LEN), "--max-chunks", str(chunks), "--json", "--no-progress"]
        cache.write_text(run_command(cmd).stdout.strip().splitlines()[-1])
    return json.loads(cache.read_text())


def infill_prompt() -> tuple[dict, str]:
    """A WikiText-2 (test) chunk with its middle tokens left out: the --infill JSON and the chunk's text."""
    from aogpt_plugin.data.tokenizer import load_tokenizer
    from aogpt_plugin.eval.benchmarks import load_documents, pack_documents

    tokenizer = load_tokenizer(str(ROOT / TOKENIZER))
    chunk = pack_documents(load_documents("wikitext2").texts, tokenizer, INFILL["length"]).chunks[40].tolist()
    keep, n = INFILL["keep"], INFILL["length"]
    spans = [{"start": 0, "tokens": chunk[:keep]}, {"start": n - keep, "tokens": chunk[n - keep :]}]
    return {"spans": spans}, tokenizer.decode(chunk)


def infill(model: Path, prompt: dict) -> str:
    cache = model.parent / f"{model.name}.infill.json"
    if not cache.exists():
        cmd = aogpt("sample", "--model", str(model), "--length", str(INFILL["length"]), "--infill", json.dumps(prompt))
        cmd += ["--steps", str(INFILL["length"] - 2 * INFILL["keep"]), "--seed", "0", "--top-p", "0.9", "--json"]
        cmd += ["--no-progress"]
        cache.write_text(run_command(cmd).stdout.strip().splitlines()[-1])
    return json.loads(cache.read_text())["text"][0]


# ---- the report ----------------------------------------------------------------------------------------
def nll_measure(records: list[dict]) -> Measurement:
    return measure([r["nll"] for r in records], [r["nll_se_chunks"] or 0.0 for r in records])


def curve(runs: list[Path], tag: str) -> tuple[list[int], list[float], list[float]]:
    """Steps, mean and standard error over the runs of a validation curve."""
    series = [scalars(r, tag) for r in runs]
    steps = sorted(set.intersection(*(set(s) for s in series)))
    means, ses = [], []
    for step in steps:
        values = [s[step] for s in series]
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        means.append(mean)
        ses.append(math.sqrt(var / len(values)))
    return steps, means, ses


WORDS = {REPRODUCED: "better", INCONCLUSIVE: "inconclusive"}


def claim(a: Measurement, b: Measurement) -> str:
    """'**better** (a - b = -0.1234 ± 0.0100, 12.3 SE)': A's NLL below B's by more than 2 SE is better, above
    by more than 2 SE worse, else inconclusive."""
    d = difference(a, b)
    word = WORDS.get(verdict(d, "negative"), "worse")
    z = abs(d.mean) / d.se if d.se > 0 else math.inf
    return f"**{word}** ({d.mean:+.4f} ± {d.se:.4f} nats, |d| = {z:.1f} SE)"


def plots(out_png: Path, curves: dict, wikitext: dict, standin: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for ax, (tag, title) in zip(axes, ((RANDOM, "any order (random)"), (L2R, "left to right")), strict=True):
        for variant, per_tag in curves.items():
            steps, mean, se = per_tag[tag]
            ax.plot(steps, mean, marker="o", ms=3, label=variant)
            ax.fill_between(
                steps,
                [m - s for m, s in zip(mean, se, strict=True)],
                [m + s for m, s in zip(mean, se, strict=True)],
                alpha=0.25,
            )
        ax.set_title(f"held-out validation loss, {title} (EMA weights)")
        ax.set_xlabel("training step")
        ax.set_ylabel("nats / token")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out_png / "gpt2_start_curves.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(wikitext)
    for ax, order in zip(axes, ("random", "l2r"), strict=True):
        means = [wikitext[v][order].mean for v in names]
        ses = [wikitext[v][order].se for v in names]
        ax.bar(range(len(names)), means, yerr=[2 * s for s in ses], capsize=4, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel("WikiText-2 NLL (nats / token)")
        ax.set_title(f"WikiText-2 test, read {'in random orders' if order == 'random' else 'left to right'} (±2 SE)")
        top = max(m + 2 * s for m, s in zip(means, ses, strict=True)) + 0.3
        ax.set_ylim(min(min(means), standin[order]["nll"]) - 0.5, top)
        label = f"the stand-in GPT-2, before AO training: {standin[order]['nll']:.2f}"
        if standin[order]["nll"] < top:
            ax.axhline(standin[order]["nll"], color="tab:red", ls="--", label=label)
            ax.legend(loc="upper right", fontsize=8)
        else:  # far above the bars: said, not drawn
            ax.text(
                0.02, 0.97, f"{label} (above the scale)", transform=ax.transAxes, va="top", fontsize=8, color="tab:red"
            )
    fig.tight_layout()
    fig.savefig(out_png / "gpt2_start_wikitext.png", dpi=110)
    plt.close(fig)


def report(results: dict, meta: dict) -> str:
    """The study's block of docs/findings.md."""
    cmd = meta["command"]
    V = results["variants"]
    L = ["<!-- kept: gpt2_start_study -->\n## Starting from GPT-2\n\n"]
    add = L.append
    add(
        f"Every number, verdict and plot of this section was produced by one run of\n\n```\n{cmd}\n```\n\non "
        f"{meta['machine']}, finished {meta['finished']}: {meta['wall_minutes']:.0f} min of wall clock (the invocation that "
        "trained everything) "
        f"(stand-in {meta['standin_seconds']:.0f} s, {len(meta['run_seconds'])} training runs {sum(meta['run_seconds']) / 60:.1f} "
        "min of single-thread time, two side by side, evaluation and infill the rest). Re-running it reuses what "
        f"`{meta['out']}` holds. The question: does any-order training that starts from a left-to-right model (the "
        "[None] slot reading `<|endoftext|>`, positions unshifted, adaLN at the identity) beat the same training from "
        "scratch at equal steps and tokens, and does moving from left-to-right to any order gradually "
        "(`[aogpt] l2r_curriculum_steps`) help?\n\n"
    )
    standin = results["standin"]
    add(
        "**Setup.** The stand-in GPT-2: `python scripts/make_gpt2_standin.py` (transformers' GPT2LMHeadModel, 4 layers, "
        f"128 wide, 4 heads, 256 positions; the findings study's 1024-token byte-level BPE; {standin['steps']} steps of "
        f"{standin['batch']} x {standin['seq_len'] + 1} tokens of the Wikipedia training shards; final training loss "
        f"{standin['final_loss']:.3f}). Each run: `{RECIPE}` (AO-GPT on GPT-2's backbone, flavor `gpt2-tiny`; "
        f"{meta['steps']} steps of 16 x 64 tokens, windows shuffled through a 4096-window buffer, 90% random + 10% "
        "left-to-right orders, AdamW 2e-3, 30 warm-up steps, cosine to 10%, EMA 0.99), the variants differing only in "
        f"the start and the curriculum; seeds {', '.join(map(str, meta['seeds']))} (`--debug.seed K --aogpt.order_seed K`: "
        "the init of what is not loaded, the orders, the window shuffle). Means over seeds ± standard errors "
        "(aogpt_plugin/eval/verdicts.py: se² = max(variance over seeds / R, mean evaluation se² / R)). WikiText-2: "
        f"test split, {meta['chunks']} chunks of {SEQ_LEN} tokens, EMA weights, `aogpt eval ppl --order random` "
        "(one random order per chunk) and `--order l2r`.\n\n"
    )
    add(
        "| variant | what | validation, random order | validation, left to right | context gain | WikiText-2 random: "
        "NLL (ppl) | WikiText-2 left to right: NLL (ppl) |\n|---|---|---|---|---|---|---|\n"
    )
    sr, sl = standin["wikitext"]["random"], standin["wikitext"]["l2r"]
    add(
        f"| stand-in GPT-2 (before AO training) | `aogpt convert --from-hf` of it | – | – | – | {sr['nll']:.4f} ± "
        f"{sr['nll_se_chunks']:.4f} ({sr['ppl']:.1f}) | {sl['nll']:.4f} ± {sl['nll_se_chunks']:.4f} ({sl['ppl']:.1f}) |\n"
    )
    for variant, v in V.items():
        w = v["wikitext"]
        add(
            f"| {variant} | {VARIANTS[variant][2]} | {v['final'][RANDOM]} | {v['final'][L2R]} | {v['final'][GAIN]} | "
            f"{w['random']} "
            f"({math.exp(w['random'].mean):.1f}) | {w['l2r']} ({math.exp(w['l2r'].mean):.1f}) |\n"
        )
    add(
        "\nValidation: the held-out Wikipedia file, the final step's EMA weights, nats per token; context gain: the NLL of "
        "the same targets when every slot reads another window's tokens, minus the NLL in the window's own random order "
        "(0: a model that uses only token frequencies and positions, the plateau of the findings above).\n"
        f"\n![](findings/gpt2_start_curves.png)\n\n`{cmd}` (validation every 50 steps and at step 1, EMA weights, mean ± 1 SE "
        "over seeds). At step 1 a run from the GPT-2 reads left to right as the GPT-2 does; in random orders it starts "
        "worse than a uniform guess (ln 1024 = 6.93): with adaLN at the identity it does not yet know which position it "
        "predicts.\n\n"
        f"![](findings/gpt2_start_wikitext.png)\n\n`{cmd}` (bars: mean over seeds ± 2 SE; red: the stand-in GPT-2 "
        "converted, before any AO training).\n\n"
    )
    add('**Verdicts** (NLL on WikiText-2 test, nats per token; "better" only beyond 2 standard errors):\n\n')
    for label, a, b in (
        ("From the GPT-2 vs from scratch, no curriculum", "gpt2", "scratch"),
        ("From the GPT-2 vs from scratch, with the curriculum", "gpt2_curriculum", "scratch_curriculum"),
        ("The curriculum, from the GPT-2", "gpt2_curriculum", "gpt2"),
        ("The curriculum, from scratch", "scratch_curriculum", "scratch"),
    ):
        add(
            f"- {label}: random orders {claim(V[a]['wikitext']['random'], V[b]['wikitext']['random'])}; left to right "
            f"{claim(V[a]['wikitext']['l2r'], V[b]['wikitext']['l2r'])}\n"
        )
    base = Measurement(sl["nll"], sl["nll_se_chunks"] or 0.0)
    for variant in ("gpt2", "gpt2_curriculum"):
        d = difference(V[variant]["wikitext"]["l2r"], base)
        add(
            f"- Left to right after AO training ({variant}) vs the stand-in GPT-2 itself: {d.mean:+.4f} ± {d.se:.4f} "
            f"nats ({'worse' if d.mean > 2 * d.se else 'better' if d.mean < -2 * d.se else 'within 2 SE'})\n"
        )
    add(f"\n**Verdict.** {results['summary']}\n\n")
    prompt_text = results["infill"]["reference"]
    add(
        f"**An infill** (seed-0 models; WikiText-2 test chunk, {INFILL['length']} tokens: the first and last "
        f"{INFILL['keep']} given, the middle {INFILL['length'] - 2 * INFILL['keep']} sampled in a random order, one token "
        "per step, top-p 0.9, `aogpt sample --infill ... --seed 0`). The original:\n\n"
        f"> {_quote(prompt_text)}\n\n| model | infilled text |\n|---|---|\n"
    )
    for name, text in results["infill"]["samples"].items():
        add(f"| {name} | {_cell(text)} |\n")
    add("\nCommands of the training runs:\n\n")
    for name, run_cmd in sorted(meta["commands"].items()):
        add(f"- `{name}`: `python {' '.join(run_cmd)}`\n")
    add("<!-- end kept -->\n")
    return "".join(L)


def _quote(text: str) -> str:
    return text.replace("\n", " ⏎ ").strip()


def _cell(text: str) -> str:
    return _quote(text).replace("|", "\\|")


def summary(V: dict, standin_l2r: Measurement, steps: int) -> str:
    """The verdict paragraph, every judgement in it decided by the numbers."""
    wt = {v: d["wikitext"] for v, d in V.items()}

    def word(a: str, b: str, order: str) -> str:
        return WORDS.get(verdict(difference(wt[a][order], wt[b][order]), "negative"), "worse")

    rand = difference(wt["gpt2"]["random"], wt["scratch"]["random"])
    gains = [V[v]["final"][GAIN].mean for v in V]
    kept = {v: difference(wt[v]["l2r"], standin_l2r) for v in ("gpt2", "gpt2_curriculum")}
    plateau = (
        f"The random-order difference is small: after {steps} steps every variant still sits near the plateau (context "
        f"gains {min(gains):.3f} to {max(gains):.3f} nats, the goal of the findings above being 0.3), any-order learning "
        "at this scale needing more steps than this study spends"
        if max(gains) < 0.3
        else "Every variant has left the plateau (context gains of 0.3 nats and more)"
    )
    parts = [
        f"At equal steps and tokens of AO training, starting from the GPT-2 is {word('gpt2', 'scratch', 'random')} than "
        f"starting from scratch in random orders ({rand.mean:+.3f} ± {rand.se:.3f} nats) and "
        f"{word('gpt2', 'scratch', 'l2r')} left to right (the stand-in's own pretraining tokens come on top: that is the "
        "point of starting from a pretrained model).",
        f"{plateau}. Left to right, the runs from the GPT-2 end {kept['gpt2'].mean:+.3f} ± {kept['gpt2'].se:.3f} nats from "
        f"the stand-in's own NLL without the curriculum and {kept['gpt2_curriculum'].mean:+.3f} ± "
        f"{kept['gpt2_curriculum'].se:.3f} with it (from scratch: {difference(wt['scratch']['l2r'], standin_l2r).mean:+.3f}).",
        f"The curriculum, from the GPT-2 against none: {word('gpt2_curriculum', 'gpt2', 'random')} in random orders, "
        f"{word('gpt2_curriculum', 'gpt2', 'l2r')} left to right; from scratch: {word('scratch_curriculum', 'scratch', 'random')}"
        f" in random orders, {word('scratch_curriculum', 'scratch', 'l2r')} left to right.",
        "Tiny models trained for minutes: a direction for real GPT-2 sizes, not a measurement of them.",
    ]
    return " ".join(parts)


def write_block(docs: Path, block: str) -> None:
    """Replace the study's block of `docs` (or append it), leaving the rest as it is."""
    text = docs.read_text() if docs.exists() else "# Findings\n\n"
    begin, end = "<!-- kept: gpt2_start_study -->", "<!-- end kept -->"
    if begin in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n") if end in rest else ""
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(text)


# ---- main ------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "outputs" / "gpt2_study"), help="cache of every stage")
    p.add_argument("--docs", default=str(ROOT / "docs" / "findings.md"), help="the report's file (its block)")
    p.add_argument("--smoke", action="store_true", help="a few steps and chunks: checks the pipeline, not the claims")
    p.add_argument("--parallel", type=int, default=2, help="training runs side by side, one thread each (default 2)")
    args = p.parse_args(argv)
    plan = SMOKE if args.smoke else FULL
    out, docs = Path(os.path.relpath(Path(args.out).resolve(), ROOT)), Path(args.docs).resolve()  # commands: relative
    os.chdir(ROOT)  # the commands name paths from the checkout, as the recipes do
    out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    if not (ROOT / TOKENIZER).exists():
        log(f"tokenizer: {' '.join(TOKENIZER_COMMAND)}")
        run_command(aogpt(*TOKENIZER_COMMAND[1:]))
    standin_dir, standin_cmd = stand_in(out, plan)

    runs = [(variant, seed) for variant in VARIANTS for seed in plan["seeds"]]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        records = dict(zip(runs, pool.map(lambda r: train(out, *r, plan), runs), strict=True))

    log("convert and evaluate on WikiText-2")
    standin_model = out / "standin_model"
    if not (standin_model / "config.json").exists():
        run_command(aogpt("convert", "--from-hf", str(standin_dir), str(standin_model), "--tokenizer", TOKENIZER))
    standin_eval = {order: evaluate(standin_model, order, plan["chunks"]) for order in ("random", "l2r")}
    models = {}
    for variant, seed in runs:
        folder = out / run_name(variant, seed)
        model = folder / "model"
        if not (model / "config.json").exists():
            run_command(aogpt("convert", str(folder / "checkpoint"), str(model)))
        models[(variant, seed)] = model

    prompt, reference = infill_prompt()
    samples = {"stand-in GPT-2 (converted, before AO training)": infill(standin_model, prompt)}
    variants = {}
    for variant in VARIANTS:
        seeds = plan["seeds"]
        folders = [out / run_name(variant, s) for s in seeds]
        evals = {o: [evaluate(models[(variant, s)], o, plan["chunks"]) for s in seeds] for o in ("random", "l2r")}
        final = {}
        for tag in (RANDOM, L2R, GAIN):
            steps, mean, se = curve(folders, tag)
            final[tag] = Measurement(mean[-1], se[-1], len(seeds))
        variants[variant] = {
            "wikitext": {o: nll_measure(e) for o, e in evals.items()},
            "curves": {tag: curve(folders, tag) for tag in (RANDOM, L2R)},
            "final": final,
        }
        samples[f"{variant} (seed {seeds[0]})"] = infill(models[(variant, seeds[0])], prompt)

    standin_record = json.loads((standin_dir / "standin.json").read_text())
    results = {
        "variants": variants,
        "standin": {**standin_record, "wikitext": standin_eval},
        "infill": {"reference": reference, "samples": samples},
    }
    standin_l2r = Measurement(standin_eval["l2r"]["nll"], standin_eval["l2r"]["nll_se_chunks"] or 0.0)
    results["summary"] = summary(variants, standin_l2r, plan["steps"] or 400)
    shown = "python scripts/gpt2_start_study.py" + (" --smoke" if args.smoke else "")
    meta = {
        "command": shown,
        "machine": f"{os.uname().machine} CPU, {os.cpu_count()} cores",
        "finished": time.strftime("%Y-%m-%d"),
        "wall_minutes": first_wall_minutes(out, began),
        "standin_seconds": standin_record["seconds"],
        "run_seconds": [r["seconds"] for r in records.values()],
        "out": str(out),
        "steps": plan["steps"] or 400,
        "seeds": plan["seeds"],
        "chunks": plan["chunks"],
        "commands": {run_name(v, s): r["command"] for (v, s), r in records.items()},
        "standin_command": standin_cmd,
    }
    png = docs.parent / "findings"
    png.mkdir(parents=True, exist_ok=True)
    plots(
        png,
        {v: d["curves"] for v, d in variants.items()},
        {v: d["wikitext"] for v, d in variants.items()},
        standin_eval,
    )
    write_block(docs, report(results, meta))
    log(f"wrote {docs} and {png}/gpt2_start_*.png ({(time.time() - began) / 60:.1f} min this invocation)")
    return 0


def first_wall_minutes(out: Path, began: float) -> float:
    """The wall clock of the invocation that first got this far (later ones reuse its cache), kept in out."""
    wall = out / "wall.json"
    if not wall.exists():
        wall.write_text(json.dumps({"wall_minutes": (time.time() - began) / 60}))
    return json.loads(wall.read_text())["wall_minutes"]


if __name__ == "__main__":
    sys.exit(main())
