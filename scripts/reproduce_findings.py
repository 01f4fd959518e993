"""Reproduce the AO-GPT paper's findings at CPU scale (docs/findings.md), with seeds and error bars.

    python scripts/reproduce_findings.py                  # the study (resumable, cached; its wall time: docs/findings.md)
    python scripts/reproduce_findings.py --variants all   # plus the variants the plan leaves out
    python scripts/reproduce_findings.py --smoke --out /tmp/s --docs /tmp/s/findings.md   # a pipeline check
    python scripts/reproduce_findings.py --write-recipes  # regenerate train_configs/study/*.toml from PLAN

Two tracks, each through the real stack (`python -m aogpt_plugin.train`, `aogpt convert`, `aogpt eval`):
  text       Wikipedia (`train_corpus`, never the held-out or evaluation files), a 1024-token byte-level
             BPE trained here (`aogpt tokenizer train`), windows of 16 tokens, batch 128; `*_shuf`
             variants and Finding 2's fixed_random / blockwise4 draw their windows from a shuffle
             buffer (`[aogpt] shuffle_windows`), the others read torchtitan's consecutive windows
             (the AR models, and ao_random: the plateau record)
  synthetic  a sparse Markov source whose exact optimum NLL is known (aogpt_plugin/data/synthetic.py),
             so each variant's gap to the best possible model is measured, not guessed
Variants whose effects are small, and every synthetic variant (its plateau exit varies with the
seed), run with three seeds. Stages, each cached under --out so that a second
invocation reuses finished work: tokenizer, throughput (two one-thread trainings side by side vs one
two-thread training, measured; the faster way trains), train, eval, report
(scripts/findings_report.py: tables, verdicts by the 2-SE rule of aogpt_plugin/eval/verdicts.py, plots).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from study_plan import (  # noqa: E402
    BATCH,
    FULL,
    HELDOUT,
    SAMPLING,
    SEQ_LEN,
    SHUFFLED,
    SMOKE,
    SYNTHETIC,
    TRACK,
    TRAIN_GLOB,
    TUNED,
    VARIANTS,
    VOCAB,
    runs,
)


def log(msg: str) -> None:
    print(f"[findings {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_json(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


# ---- recipes ---------------------------------------------------------------------------------------
RECIPE = """# Study variant "{name}" ({track} track): {what}.
# Part of scripts/reproduce_findings.py (docs/findings.md); the variants of a track share everything
# but [aogpt] conditioning and order. Written by `python scripts/reproduce_findings.py --write-recipes`.{note}

[job]
dump_folder = "./outputs/study/{name}_s0"
description = "findings study: {name}"
custom_config_module = "aogpt_plugin.training.job_config"

[experimental]
custom_import = "aogpt_plugin"

[metrics]
log_freq = 50
enable_tensorboard = true
save_tb_folder = "tb"

[model]
name = "aogpt"
flavor = "{flavor}"
hf_assets_path = "."  # unused by aogpt

[aogpt]
conditioning = "{conditioning}"
order = "{order}"
tokenizer = "{tokenizer}"
val_orders = 2
shuffle_windows = {shuffle}

[ema]
decay = {ema}              # about 1/(1 - decay) = {ema_steps} steps averaged, suited to {steps} steps

[optimizer]
name = "AdamW"
lr = {lr}
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.05
implementation = "foreach"

[lr_scheduler]
warmup_steps = {warmup}
decay_ratio = {decay_ratio}        # warmup-stable-decay: constant, then linear to 10% over the last {decay_pct}%
decay_type = "linear"
min_lr_factor = 0.1

[activation_checkpoint]
mode = "none"              # a tiny model: recomputing activations would only cost time

[training]
dataset = "{dataset}"
dataset_path = "{dataset_path}"
local_batch_size = {batch}
seq_len = {seq_len}
max_norm = 1.0
steps = {steps}
dtype = "float32"
mixed_precision_param = "float32"

[checkpoint]
enable = true
folder = "checkpoint"
interval = {interval}
last_save_model_only = false
keep_latest_k = 2

[debug]
seed = 0

[validation]
enable = true
dataset = "{dataset}"
dataset_path = "{val_path}"
local_batch_size = {batch}
seq_len = {seq_len}
freq = {val_freq}
steps = 4
"""


def write_recipes() -> None:
    folder = ROOT / "train_configs" / "study"
    for old in folder.glob("*.toml"):
        old.unlink()
    for name, (track, conditioning, order, _seeds, what) in VARIANTS.items():
        t = TRACK[track]
        text = track == "text"
        note = (
            "\n# Needs the study tokenizer first: aogpt tokenizer train "
            f"'{TRAIN_GLOB}' outputs/study/tokenizer.json --vocab-size {VOCAB} --max-bytes 5000000"
            if text
            else ""
        )
        (folder / f"{name}.toml").write_text(
            RECIPE.format(
                name=name,
                track=track,
                what=what,
                note=note,
                conditioning=conditioning,
                order=order,
                tokenizer="outputs/study/tokenizer.json" if text else "symbols:32",
                shuffle=SHUFFLED.get(name, 0),
                dataset="local" if text else "synthetic",
                dataset_path=TRAIN_GLOB if text else SYNTHETIC,
                val_path=HELDOUT if text else SYNTHETIC,
                batch=BATCH,
                seq_len=SEQ_LEN,
                ema_steps=round(1 / (1 - t["ema"])),
                decay_pct=round(100 * t["decay_ratio"]),
                **{**t, **TUNED.get(name, {})},
            )
        )
    log(f"wrote {len(VARIANTS)} recipes to {folder.relative_to(ROOT)}")


# ---- stages ----------------------------------------------------------------------------------------
def train_tokenizer(out: Path) -> Path:
    path = out / "tokenizer.json"
    if not path.exists():
        from aogpt_plugin.data.tokenizer_training import train_tokenizer as train

        result = train(str(ROOT / TRAIN_GLOB), VOCAB, str(path), max_bytes=5_000_000)
        log(f"tokenizer: {result['vocab_size']} tokens in {result['seconds']} s")
    return path


def train_run(run: str, variant: str, seed: int, out: Path, plan: dict, tokenizer: Path) -> dict:
    run_dir = out / run
    track = VARIANTS[variant][0]
    done = read_json(run_dir / "DONE.json")
    shown = lambda p: str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)  # noqa: E731  (commands run in ROOT)
    cmd = [
        sys.executable, "-m", "aogpt_plugin.train",
        "--job.config_file", f"train_configs/study/{variant}.toml",
        "--job.dump_folder", shown(run_dir),
        "--debug.seed", str(seed), "--aogpt.order_seed", str(seed),
        *(["--aogpt.tokenizer", shown(tokenizer)] if track == "text" else []),
        *plan["overrides"],
    ]  # fmt: skip
    command = "python " + " ".join(cmd[1:])
    recipe = hashlib.sha256((ROOT / "train_configs" / "study" / f"{variant}.toml").read_bytes()).hexdigest()[:16]
    if done and done["command"] == command and "recipe" not in done:  # written before recipes were fingerprinted:
        write_json(run_dir / "DONE.json", done := {**done, "recipe": recipe})  # taken as trained by this one, once
    if done and done["command"] == command and done["recipe"] == recipe:
        return done
    if done:  # finished by another recipe or command: kept beside, never resumed or overwritten (an unfinished
        # run, with no DONE.json, resumes from its last checkpoint)
        stale = run_dir.with_name(f"{run}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
        run_dir.rename(stale)
        log(f"train {run}: its recipe or command changed since it was trained; the old run moved to {stale.name}")
    log(f"train {run}: {command}")
    started = time.time()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with open(out / f"{run}.train.log", "a") as logf:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        raise SystemExit(f"error: training {run} failed (exit {rc}); see {out / (run + '.train.log')}")
    done = {"seconds": time.time() - started, "command": command, "recipe": recipe}
    write_json(run_dir / "DONE.json", done)
    log(f"train {run}: done in {done['seconds']:.0f} s")
    return done


def measure_throughput(out: Path, plan: dict, tokenizer: Path) -> dict:
    """Tokens/s of two single-thread trainings side by side vs one two-thread training (ao_random,
    `throughput_steps` steps each, the trainer's own tps at the last logged step). Decides how the
    study runs its trainings; cached in throughput.json."""
    path = out / "throughput.json"
    if read_json(path):
        return read_json(path)
    steps = plan["throughput_steps"]

    def tps(name: str, threads: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "aogpt_plugin.train", "--job.config_file", "train_configs/study/ao_random.toml",
               "--job.dump_folder", str(out / "throughput" / name), "--aogpt.tokenizer", str(tokenizer),
               "--training.steps", str(steps), "--validation.freq", "100000", "--checkpoint.interval", "100000",
               "--metrics.log_freq", str(steps // 2)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    def last_tps(proc: subprocess.Popen) -> float:
        text, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"error: the throughput measurement failed:\n{text[-2000:]}")
        return float(re.findall(r"tps: ([\d,]+)", re.sub(r"\x1b\[[0-9;]*m", "", text))[-1].replace(",", ""))

    pair = [tps("one_thread_a", 1), tps("one_thread_b", 1)]
    two_single = sum(last_tps(p) for p in pair)
    one_double = last_tps(tps("two_threads", 2))
    result = {"two_single_thread_tps": two_single, "one_two_thread_tps": one_double, "steps": steps,
              "workers": 2 if two_single > one_double else 1}  # fmt: skip
    write_json(path, result)
    log(f"throughput: 2 x 1 thread {two_single:.0f} tok/s, 1 x 2 threads {one_double:.0f} tok/s")
    return result


def train_all(out: Path, plan: dict, variants, tokenizer: Path, workers: int) -> dict:
    """Trainings side by side in `workers` processes (measure_throughput decides), longest first."""
    longest = lambda r: (r[1] not in TUNED, VARIANTS[r[1]][0] != "text")  # noqa: E731  (the long runs, then text)
    todo = sorted(runs(variants), key=longest)  # stable: the given order within a track
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda r: (r[0], train_run(*r, out, plan, tokenizer)), todo))
    return dict(done)


class Cache:
    """eval.json per run: one entry per measurement, written as soon as it exists."""

    def __init__(self, path: Path):
        self.path, self.data = path, read_json(path) or {}

    def get(self, key: str, compute):
        if key not in self.data:
            started = time.time()
            self.data[key] = compute()
            seconds = time.time() - started
            self.data.setdefault("_seconds", {})[key] = seconds  # what the report says evaluation took
            log(f"  {self.path.parent.name}/{key} ({seconds:.0f} s)")
            write_json(self.path, self.data)
        return self.data[key]


def aogpt_json(argv: list[str]) -> dict:
    """An `aogpt ...` command run in this process; its --json object."""
    from aogpt_plugin.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*argv, "--json", "--no-progress"])
    if rc != 0:
        raise SystemExit(f"error: aogpt {' '.join(argv)} failed with exit {rc}")
    return json.loads(buf.getvalue().strip().splitlines()[-1])


def convert_weights(run_dir: Path, weights: str, tokenizer: str) -> str:
    target = run_dir / f"model_{weights}"
    if not (target / "config.json").exists():
        from aogpt_plugin.convert import convert

        convert(str(run_dir / "checkpoint"), str(target), weights, None, tokenizer, True)
    return str(target)


def heldout_windows(tokenizer_path: str, count: int):
    import torch

    from aogpt_plugin.data.text_files import iter_documents
    from aogpt_plugin.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer_path)
    ids: list[int] = []
    for doc in iter_documents(str(ROOT / HELDOUT)):
        ids += tok.encode(doc, add_eos=True)
        if len(ids) >= SEQ_LEN * count:
            break
    return torch.tensor(ids[: SEQ_LEN * count]).view(count, SEQ_LEN)


def per_window(nlls) -> list[float]:
    """Mean NLL per window (row) of a (windows, n) tensor of token NLLs."""
    return nlls.double().mean(dim=1).tolist()


def eval_orders(spec: str, count: int, seed: int):
    """The orders a variant is scored in: random orders from an evaluation stream no training used
    (the same for every run), or the run's own fixed order (which its order seed made)."""
    import torch

    from aogpt_plugin.orders import OrderSampler

    fixed = spec.startswith(("fixed_random", "blockwise"))
    sampler = OrderSampler(spec, SEQ_LEN, seed=seed if fixed else 12345)
    return torch.stack([sampler.sample(stream=99, index=i) for i in range(count)])


def eval_run(run: str, variant: str, seed: int, out: Path, plan: dict, tokenizer: Path) -> dict:
    """Per-window (text) or per-sequence (synthetic) NLLs of raw and EMA weights, and their context gain."""
    import torch

    from aogpt_plugin.data.synthetic import MarkovSource, MarkovSpec
    from aogpt_plugin.likelihood import other_context_nlls, token_nlls
    from aogpt_plugin.model_dir import load_model_dir
    from aogpt_plugin.seeding import stream_generator

    track, _cond, order, _seeds, _what = VARIANTS[variant]
    run_dir = out / run
    cache = Cache(run_dir / "eval.json")
    spec = str(tokenizer) if track == "text" else "symbols:32"
    if track == "text":
        x = heldout_windows(str(tokenizer), plan["heldout_windows"])
    else:
        source = MarkovSource(MarkovSpec.parse(SYNTHETIC))
        x = source.sample(plan["synthetic_sequences"], SEQ_LEN, stream_generator("synthetic_eval", 0, 1))
        cache.get("optimum", lambda: source.optimum_nll(SEQ_LEN))
        cache.get("unigram_entropy", source.unigram_entropy)
    own = eval_orders(order if order != "mixture" else "random", len(x), seed)  # mixtures: scored in random orders
    rand = eval_orders("random", len(x), seed)
    for weights in ("raw", "ema"):
        model = load_model_dir(convert_weights(run_dir, weights, spec)).model

        def measure(model=model):
            mine = None if order == "l2r" else own
            with torch.no_grad():
                return {
                    "own": per_window(token_nlls(model, x, mine)),
                    "wrong": per_window(other_context_nlls(model, x, mine)),  # same targets, another window's tokens
                    "l2r": per_window(token_nlls(model, x, None)),
                    "random": per_window(token_nlls(model, x, rand)),
                }

        cache.get(f"windows_{weights}", measure)
    return cache.data


def eval_zero_shot(run: str, variant: str, out: Path, plan: dict) -> dict:
    cache = Cache(out / run / "eval.json")
    model = str(out / run / "model_ema")
    common = ["--seq-len", str(SEQ_LEN), "--max-chunks", str(plan["zero_shot_chunks"]), "--seed", "0"]
    result = {}
    for ds in plan["datasets"]:
        for order in ("l2r", "random"):
            if VARIANTS[variant][1] == "none" and order == "random":
                continue  # a model without target conditioning cannot be told which position comes next
            result[f"{ds}_{order}"] = cache.get(
                f"zeroshot_{ds}_{order}",
                lambda ds=ds, order=order: aogpt_json(
                    ["eval", "ppl", "--model", model, "--dataset", ds, "--order", order, *common]
                ),
            )
    return result


def best_ao_run(out: Path, evals: dict) -> str:
    """The text-track AO run with the lowest any-order held-out NLL (EMA weights)."""
    ao = [v for v in VARIANTS if VARIANTS[v][0] == "text" and VARIANTS[v][2] not in ("l2r", "fixed_random")]
    candidates = [r for r, v, _ in runs(ao) if r in evals and not v.startswith("blockwise")]
    return min(
        candidates, key=lambda r: sum(evals[r]["windows_ema"]["random"]) / len(evals[r]["windows_ema"]["random"])
    )


def eval_ensemble(run: str, out: Path, plan: dict, tokenizer: Path) -> dict:
    """Finding 6: context-order ensembles M = 1..M on WikiText-2 chunks; per-chunk NLL for every M."""
    import torch

    from aogpt_plugin.eval.benchmarks import load_documents, pack_documents
    from aogpt_plugin.eval.perplexity import score_chunks
    from aogpt_plugin.model_dir import load_model_dir

    cache = Cache(out / run / "eval.json")

    def compute():
        loaded = load_model_dir(str(out / run / "model_ema"))
        packed = pack_documents(load_documents("wikitext2", "test").texts, loaded.tokenizer(), SEQ_LEN)
        chunks = packed.chunks[: plan["ensemble_chunks"]]
        with torch.no_grad():
            scores = score_chunks(loaded.model, chunks, "random", draws=1, members=plan["ensemble_members"], seed=0)
        return {
            "sizes": scores.sizes,
            "per_chunk": scores.per_draw_nll[:, 0, :].tolist(),
            "slots": scores.cost.as_dict(),
        }

    return cache.get(f"ensemble_{plan['ensemble_members']}", compute)


def eval_generation(run: str, scorer_run: str, out: Path, plan: dict) -> dict:
    """Table 1: gen-PPL (mean of per-sample PPL) and unigram entropy per (top-p, temperature, T)."""
    cache = Cache(out / run / "eval.json")
    model, scorer = str(out / run / "model_ema"), str(out / scorer_run / "model_ema")
    result = {}
    for top_p, temperature in SAMPLING:
        for steps in plan["gen_steps"]:
            key = f"genppl_p{top_p}_t{temperature}_T{steps}"
            argv = ["eval", "genppl", "--model", model, "--scorer", scorer, "--num-samples", str(plan["gen_samples"])]
            argv += ["--length", str(SEQ_LEN), "--steps", str(steps), "--top-p", str(top_p)]
            argv += ["--temperature", str(temperature), "--seed", "0", "--batch-size", "64"]
            result[key] = cache.get(key, lambda argv=argv: aogpt_json(argv))
    return result


def eval_all(out: Path, plan: dict, variants, tokenizer: Path) -> dict:
    evals = {}
    for run, variant, seed in runs(variants):
        evals[run] = eval_run(run, variant, seed, out, plan, tokenizer)
    extras: dict = {"zero_shot": {}}
    for run, variant, seed in runs(variants):
        if VARIANTS[variant][0] == "text" and seed == 0 and variant not in ("fixed_random", "blockwise4"):
            extras["zero_shot"][run] = eval_zero_shot(run, variant, out, plan)
    if any(VARIANTS[v][0] == "text" and VARIANTS[v][2] != "l2r" for v in variants):
        best = best_ao_run(out, evals)
        extras["best_ao"] = best
        extras["ensemble"] = eval_ensemble(best, out, plan, tokenizer)
        if "ar_s0" in evals:
            extras["generation"] = eval_generation(best, "ar_s0", out, plan)
    return {"runs": evals, **extras}


# ---- main ------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="cache folder (default outputs/study)")
    p.add_argument("--docs", default=str(ROOT / "docs" / "findings.md"), help="report to write")
    p.add_argument("--smoke", action="store_true", help="a few steps of a few variants: checks the pipeline")
    p.add_argument("--variants", default=None, help="comma list, or all (default: the plan's)")
    p.add_argument("--write-recipes", action="store_true", help="regenerate train_configs/study/*.toml and stop")
    args = p.parse_args(argv)
    if args.write_recipes:
        write_recipes()
        return 0
    plan = SMOKE if args.smoke else FULL
    if args.variants == "all":
        args.variants = ",".join(VARIANTS)
    variants = tuple(args.variants.split(",")) if args.variants else plan.get("variants", tuple(VARIANTS))
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        print(f"error: --variants {unknown[0]!r} is unknown; allowed: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    missing = [v for v in variants if not (ROOT / "train_configs" / "study" / f"{v}.toml").is_file()]
    if missing:
        print(
            f"error: recipe train_configs/study/{missing[0]}.toml is missing; "
            "`python scripts/reproduce_findings.py --write-recipes` writes every variant's",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out or ROOT / "outputs" / "study").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "data" / "tiktoken_cache"))
    os.environ.setdefault("AOGPT_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    started = time.time()
    tokenizer = train_tokenizer(out)
    throughput = measure_throughput(out, plan, tokenizer)
    trained = train_all(out, plan, variants, tokenizer, throughput["workers"] if plan["workers"] > 1 else 1)
    train_seconds = time.time() - started
    results = eval_all(out, plan, variants, tokenizer)
    meta = {
        "train_seconds": {k: v["seconds"] for k, v in trained.items()},
        "commands": {k: v["command"] for k, v in trained.items()},
        "wall_train": train_seconds,
        "wall_total": time.time() - started,
        "eval_seconds": sum(
            sum((read_json(out / run / "eval.json") or {}).get("_seconds", {}).values()) for run, _, _ in runs(variants)
        ),
        "smoke": args.smoke,
        "plan": {k: v for k, v in plan.items() if k != "overrides"},
        "variants": list(variants),
        "throughput": throughput,
    }
    write_json(out / "results.json", {"meta": meta, **results})
    from findings_report import write_report

    write_report(out, Path(args.docs), results, meta)
    log(f"wrote {args.docs} ({meta['wall_total'] / 60:.0f} min this invocation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
