"""The findings study's plan: its variants, tracks, shapes and sampling settings, the one source that
scripts/reproduce_findings.py (which trains and evaluates them) and scripts/findings_report.py (which
writes docs/findings.md from the results) both read.
"""

from __future__ import annotations

TRAIN_GLOB = "../shared/data/train_corpus/enwiki2015_train_*.jsonl"
HELDOUT = "../shared/data/train_corpus/enwiki2015_heldout.jsonl"
SYNTHETIC = "markov:vocab=32,order=2,branching=4,alpha=0.5,seed=0"

# variant: (track, conditioning, order, seeds, what it is)
VARIANTS = {
    "ar": ("text", "none", "l2r", (0,), "plain GPT: left to right, no target conditioning"),
    "ar_adaln": ("text", "adaln", "l2r", (0,), "AR control with AO-GPT's architecture (adaLN), left to right"),
    "ao_random": ("text", "adaln", "random", (0,), "AO-GPT, uniformly random orders"),
    "ao_random_shuf": ("text", "adaln", "random", (0, 1, 2), "AO-GPT, random orders, windows shuffled (8192)"),
    "ao_mix10_shuf": (
        "text",
        "adaln",
        "mixture",
        (0,),
        "AO-GPT, 90% random + 10% left-to-right orders (the paper's), windows shuffled",
    ),
    "sigma_concat_shuf": (
        "text",
        "concat",
        "random",
        (0, 1, 2),
        "sigma-GPT: target position added at the input, random orders, windows shuffled",
    ),
    "ao_mix10": ("text", "adaln", "mixture", (0, 1), "AO-GPT, 90% random + 10% left-to-right orders (the paper's)"),
    "sigma_concat": (
        "text",
        "concat",
        "random",
        (0, 1),
        "sigma-GPT: target position added at the input, random orders",
    ),
    "fixed_random": ("text", "adaln", "fixed_random", (0,), "one fixed random order, windows shuffled"),
    "blockwise4": (
        "text",
        "adaln",
        "blockwise:4",
        (0,),
        "blocks of 4 left to right, a fixed order inside, windows shuffled",
    ),
    "syn_ar": ("synthetic", "none", "l2r", (0, 1, 2), "plain GPT"),
    "syn_ao_random": ("synthetic", "adaln", "random", (0, 1, 2), "AO-GPT, random orders"),
    "syn_ao_mix10": ("synthetic", "adaln", "mixture", (0, 1, 2), "AO-GPT, 90% random + 10% left-to-right orders"),
    "syn_sigma_concat": ("synthetic", "concat", "random", (0, 1, 2), "sigma-GPT"),
    "syn_ao_random_long": ("synthetic", "adaln", "random", (0,), "AO-GPT, random orders, trained 4000 steps"),
    # the same compute (about 20 min of one core) spent another way: learning rate, width and depth
    "syn_ao_random_lr1e3": ("synthetic", "adaln", "random", (0,), "AO-GPT, random orders, lr 1e-3, 4000 steps"),
    "syn_ao_random_lr1e2": ("synthetic", "adaln", "random", (0,), "AO-GPT, random orders, lr 1e-2, 4000 steps"),
    "syn_ao_random_mini": ("synthetic", "adaln", "random", (0,), "AO-GPT, random orders, flavor mini, 1000 steps"),
    "syn_ao_random_mini_lr1e3": (
        "synthetic",
        "adaln",
        "random",
        (0,),
        "AO-GPT, random orders, flavor mini, lr 1e-3, 1000 steps",
    ),
    "syn_ao_random_lr1e2_long": (
        "synthetic",
        "adaln",
        "random",
        (0,),
        "AO-GPT, random orders, lr 1e-2, 8000 steps",
    ),
    "syn_ao_random_lr1e2_warm": (
        "synthetic",
        "adaln",
        "random",
        (0,),
        "AO-GPT, random orders, lr 1e-2 after 1000 warm-up steps, 8000 steps",
    ),
    "syn_ao_random_debug": (
        "synthetic",
        "adaln",
        "random",
        (0,),
        "AO-GPT, random orders, flavor debugmodel, 16000 steps",
    ),
}
# variant: what its recipe changes of its track's (TRACK); the synthetic any-order runs that say how the
# gap to the optimum falls with compute, each about the one-core time of syn_ao_random_long (mini costs
# about 4x tiny per token, debugmodel about 1/4: their steps keep the compute)
TUNED = {
    "syn_ao_random_long": dict(steps=4000),
    "syn_ao_random_lr1e3": dict(steps=4000, lr=1e-3),
    "syn_ao_random_lr1e2": dict(steps=4000, lr=1e-2),
    "syn_ao_random_mini": dict(steps=1000, flavor="mini"),
    "syn_ao_random_mini_lr1e3": dict(steps=1000, flavor="mini", lr=1e-3),  # a wider model's usual lower lr
    "syn_ao_random_debug": dict(steps=16000, flavor="debugmodel"),
    # lr 1e-2 left the plateau last but then fell fastest: does that hold past 4000 steps?
    "syn_ao_random_lr1e2_long": dict(steps=8000, lr=1e-2),
    "syn_ao_random_lr1e2_warm": dict(steps=8000, lr=1e-2, warmup=1000),
}
# sweep runs the plan leaves out to keep the study within 2.5 h on 2 cores: lr1e2 is lr1e2_long until its
# decay starts, and mini at the track's 3e-3 spends 3/4 of its compute on the plateau (mini_lr1e3 is the fair one)
OPT_IN = ("syn_ao_random_lr1e3", "syn_ao_random_lr1e2", "syn_ao_random_mini")
SHUFFLED = {
    "ao_random_shuf": 8192,
    "ao_mix10_shuf": 8192,
    "sigma_concat_shuf": 8192,
    "fixed_random": 8192,
    "blockwise4": 8192,
}  # [aogpt] shuffle_windows of a variant (0: torchtitan's consecutive windows)
TRACK = {  # what the recipes of a track share
    "text": dict(flavor="tiny", steps=1750, lr=3e-3, warmup=50, decay_ratio=0.2, ema=0.998, val_freq=250, interval=500),
    "synthetic": dict(flavor="tiny", steps=1200, lr=3e-3, warmup=50, decay_ratio=0.2, ema=0.998, val_freq=250, interval=500),
}  # fmt: skip
SEQ_LEN, BATCH, VOCAB = 16, 128, 1024
FULL = dict(
    heldout_windows=512, synthetic_sequences=2000, zero_shot_chunks=64, ensemble_chunks=32, ensemble_members=8,
    gen_samples=64, gen_steps=(4, 8, 16), datasets=("wikitext2", "ptb", "lambada"), workers=2, overrides=[],
    throughput_steps=80,
    # what one plain run trains (29 runs, the TUNED ones the longest; its wall time: docs/findings.md); `--variants all`
    # adds the consecutive-window ao_mix10 and sigma_concat, and OPT_IN
    variants=("ar", "ar_adaln", "ao_random", "ao_random_shuf", "ao_mix10_shuf", "sigma_concat_shuf",
              "fixed_random", "blockwise4", *(v for v in TUNED if v not in OPT_IN), "syn_ar", "syn_ao_random",
              "syn_ao_mix10", "syn_sigma_concat"),
)  # fmt: skip
SMOKE = dict(
    heldout_windows=16, synthetic_sequences=32, zero_shot_chunks=2, ensemble_chunks=1, ensemble_members=2,
    gen_samples=4, gen_steps=(4,), datasets=("ptb",), workers=2, throughput_steps=4,
    overrides=["--training.steps", "4", "--validation.freq", "2", "--checkpoint.interval", "4",
               "--validation.steps", "1", "--metrics.log_freq", "1", "--lr_scheduler.warmup_steps", "1"],
    variants=("ar", "ao_random", "sigma_concat", "syn_ar", "syn_ao_random"),
)  # fmt: skip
SAMPLING = ((1.0, 1.0), (0.95, 0.9), (0.95, 0.7))  # (top-p, temperature), Table 1's three settings


def runs(variants) -> list[tuple[str, str, int]]:
    """(run name, variant, seed) for every training run."""
    return [(f"{v}_s{s}", v, s) for v in variants for s in VARIANTS[v][3]]
