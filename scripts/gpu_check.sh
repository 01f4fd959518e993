#!/usr/bin/env bash
# One command that checks every CUDA path and records GPU throughput (issue 15), or proves itself on a CPU.
#
#   bash scripts/gpu_check.sh OUTDIR        # writes OUTDIR/gpu_check.log and OUTDIR/summary.json
#
# On the lent GPU machine (device tool; carry [".whl"] made by scripts/download_gpu_wheels.sh):
#   bash scripts/gpu_check.sh "$OUT"
# Steps: install the carried wheels where a package is missing (never replacing torch), print the
# device, `pytest -m gpu` (bf16 + FSDP2/NCCL + compile + AC training with exact resume and convert,
# float8, the sampler and eval on CUDA), then the training part (issue 37; at most 9 minutes on one
# H100, each step under its own timeout): `aogpt bench train` for small and medium (AO and AR, seq 1024,
# batch 16 (the recipes' micro-batch), bf16, compile; MFU, tokens/s, peak memory), the same bench's --profile of small (a step by
# kernel category), the first 60 steps of aogpt_small.toml; then `aogpt bench sampler` (small, n 256,
# batch 1/8/32), each --json.
# Without CUDA the same steps run in CPU mode at tiny sizes (debugmodel, the debug recipe): the gpu
# tests skip. The JSON lines become docs rows with `python scripts/update_benchmarks_doc.py OUTDIR/bench_*.json`.
# GPU_CHECK_PARTS="tests first_steps bench sampler sampler_compile sampler_autotune flex_decode" (the default: all) runs a subset, e.g. to
# fit one 10-minute call; parts: tests, train_bench, train_profile, first_steps (the group `training` = these
# three: at most 9 minutes, `GPU_CHECK_PARTS=training`), `bench` (every bench but the graphed sampler's:
# train_bench, train_batch (small at batch 64), train_profile and the dynamic sampler's), `sampler` and
# `sampler_compile`; `train_compile_model` only when named (the small bench with the whole model compiled).
# GPU_CHECK_TRAIN_FLAVORS="small" limits the training benches to those flavors (default: small medium).
# The sampler part (at most 8.4 minutes on one H100, each step under its own timeout): the CUDA tests of
# the graphed static step (tests/gpu/test_graphed_sampler.py), then `aogpt bench sampler --graphs on` for small at
# n=1024 with batch 1 and 32 (each with --step-profile: the kernels of 8 replayed steps at T=n, n/4 and n/16, OUTDIR/step_profile_*.json)
# and at n=256 with batch 32, then `aogpt bench requests` (256 mixed requests, batches of 1, 8 and 32;
# OUTDIR/bench_requests.json); sampler_compile (at most 6.8 minutes): `--graphs compile` at n=1024, batch 32 (T=n)
# and batch 1 (T=n, n/4, n/16: AR/AO(T=n/4) compiled), each with its --step-profile too; flex_decode (at most 3.1 minutes): the decode attention of the
# T=n step per BlockMask layout and SPLIT_KV (scripts/bench_flex_decode.py) at batch 32 and 1, OUTDIR/flex_decode_b*.json;
# sampler_autotune (at most 5 minutes): `--graphs compile` at n=1024, batch 32, T=n under TORCHINDUCTOR_MAX_AUTOTUNE=1.
# The parts do not fit one 10-minute call together; most wanted first (2026-11-28's times: sampler_compile's batch
# 32 107 s, train_bench + train_profile 87 s), about 7 and 6 minutes:
#   GPU_CHECK_PARTS="sampler_compile train_bench train_batch train_profile" GPU_CHECK_TRAIN_FLAVORS=small bash scripts/gpu_check.sh "$OUT"
#   GPU_CHECK_PARTS="flex_decode sampler_autotune" bash scripts/gpu_check.sh "$OUT"
#   GPU_CHECK_PARTS=sampler bash scripts/gpu_check.sh "$OUT"                 # the `on` rows, when time is left
#   python scripts/update_benchmarks_doc.py OUT/bench_*.json
set -uo pipefail
cd "$(dirname "$0")/.."
PARTS=" ${GPU_CHECK_PARTS:-tests first_steps bench sampler sampler_compile sampler_autotune flex_decode} "
want() {  # want PART [GROUP...]: the part, or a group that holds it, was asked for
    local p
    for p in "$@"; do [[ "$PARTS" == *" $p "* ]] && return 0; done
    return 1
}
OUT=${1:?usage: bash scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
export AOGPT_DATA_DIR=${AOGPT_DATA_DIR:-$PWD/../shared/data}
[ -d "$AOGPT_DATA_DIR" ] || export AOGPT_DATA_DIR=$PWD/shared/data   # a device run carries shared/ inside the tree
# The data folder's tiktoken cache wins: the GPU image sets TIKTOKEN_CACHE_DIR to a cache without gpt2.
[ -d "$AOGPT_DATA_DIR/tiktoken_cache" ] && export TIKTOKEN_CACHE_DIR=$AOGPT_DATA_DIR/tiktoken_cache
say() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
STEPS=()
step() {  # step NAME CMD...: run, log, record the exit status
    local name=$1; shift
    say "$name: $*"
    "$@" >>"$LOG" 2>&1
    local rc=$?
    STEPS+=("{\"step\": \"$name\", \"rc\": $rc}")
    say "$name: exit $rc"
}
timed() {  # timed NAME SECONDS CMD...: step under its own timeout (exit 124 when it ran out)
    local name=$1 seconds=$2; shift 2
    step "$name" timeout --kill-after=5 "$seconds" "$@"
}

MISSING='import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("torchtitan", "torchao", "torchdata", "datasets", "tyro")))'
if [ -d .whl ] && ! "$PY" -c "$MISSING"; then
    step install_wheels "$PY" -m pip install -q --no-index --no-deps .whl/*.whl
fi
"$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('aogpt_plugin') is None)" || step install_project "$PY" -m pip install -q --no-deps --no-build-isolation -e .
MODE=$("$PY" -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')")
"$PY" -c "
import torch, platform
print('torch', torch.__version__, 'python', platform.python_version())
print('device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" | tee -a "$LOG"

want tests && step pytest_gpu "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider --ignore tests/gpu/test_graphed_sampler.py --junitxml "$OUT/pytest_gpu.xml"
AOGPT=("$PY" -m aogpt_plugin.cli)
AOGPT_Q=$(printf '%q ' "${AOGPT[@]}")
# The training part (issue 37). GPU: the rows of docs/benchmarks.md's training section; 120+140+110+150 s
# of timeouts (+5 s kill grace each) = 9 minutes at most. CPU: the same commands at tiny sizes.
if [ "$MODE" = gpu ]; then
    TRAIN_FLAVORS=(small:120 medium:140)
    TRAIN_BATCH=16 LARGE_BATCH=64  # the recipes' micro-batch (8 was host-bound); train_batch: llm.c's for GPT-2 124M
    TRAIN_SIZE="--seq-len 1024 --batch $TRAIN_BATCH --dtype bfloat16 --compile"
    PROFILE_FLAVOR=small PROFILE_SIZE="--seq-len 1024 --batch 16 --steps 5 --dtype bfloat16 --compile" PROFILE_SECONDS=110
    # The paper's small recipe for its first steps on one GPU (issue 27): local Wikipedia shard instead of the
    # hub's OpenWebText (no network there), one 16 x 1024 micro-batch per step, validation and checkpoints off.
    FIRST_RECIPE=aogpt_small FIRST_BATCH=16 FIRST_STEPS=60 FIRST_LOG=5 FIRST_SECONDS=150
else
    TRAIN_FLAVORS=(debugmodel:300)
    TRAIN_BATCH=2 LARGE_BATCH=4
    TRAIN_SIZE="--seq-len 32 --batch $TRAIN_BATCH --steps 2 --rounds 2 --warmup 1"
    PROFILE_FLAVOR=debugmodel PROFILE_SIZE="--seq-len 32 --batch 2 --steps 2 --warmup 1" PROFILE_SECONDS=300
    FIRST_RECIPE=aogpt_debug FIRST_BATCH=8 FIRST_STEPS=2 FIRST_LOG=1 FIRST_SECONDS=300
fi
if [ -n "${GPU_CHECK_TRAIN_FLAVORS:-}" ]; then  # e.g. "small": the benches of those flavors only
    wanted=" $GPU_CHECK_TRAIN_FLAVORS " kept=()
    for f in "${TRAIN_FLAVORS[@]}"; do [[ "$wanted" == *" ${f%:*} "* ]] && kept+=("$f"); done
    TRAIN_FLAVORS=("${kept[@]}")
fi
export TORCH_LOGS=${TORCH_LOGS:-graph_breaks}  # a graph break in the compiled step shows in the log
if want train_bench training bench; then
    for flavor_seconds in "${TRAIN_FLAVORS[@]}"; do
        flavor=${flavor_seconds%:*}
        timed "bench_train_$flavor" "${flavor_seconds#*:}" sh -c "$AOGPT_Q bench train --flavor $flavor $TRAIN_SIZE --json > $OUT/bench_train_$flavor.json"
    done
fi
# train_batch (in `bench`, not in `training`): the profiled flavor at a larger micro-batch, whether it pays
want train_batch bench && timed "bench_train_${PROFILE_FLAVOR}_b$LARGE_BATCH" "$PROFILE_SECONDS" \
    sh -c "$AOGPT_Q bench train --flavor $PROFILE_FLAVOR ${TRAIN_SIZE/--batch $TRAIN_BATCH /--batch $LARGE_BATCH } --json > $OUT/bench_train_${PROFILE_FLAVOR}_b$LARGE_BATCH.json"
want train_profile training bench && timed "bench_train_profile_$PROFILE_FLAVOR" "$PROFILE_SECONDS" \
    sh -c "$AOGPT_Q bench train --flavor $PROFILE_FLAVOR $PROFILE_SIZE --profile --json > $OUT/bench_train_profile_$PROFILE_FLAVOR.json"
# train_compile_model (asked for by name only): the whole model compiled against per-block compile, one run
# (the profile of 2026-11-27 found a small step host-bound: fewer compiled regions, fewer host calls)
want train_compile_model && timed "bench_train_compile_model_$PROFILE_FLAVOR" "$PROFILE_SECONDS" \
    sh -c "$AOGPT_Q bench train --flavor $PROFILE_FLAVOR ${TRAIN_SIZE/--compile/--compile model} --json > $OUT/bench_train_compile_model_$PROFILE_FLAVOR.json"
want first_steps training && timed "first_steps_$FIRST_RECIPE" "$FIRST_SECONDS" \
    "$PY" -m aogpt_plugin.train --job.config_file "train_configs/$FIRST_RECIPE.toml" \
    --job.dump_folder "$OUT/first_steps_$FIRST_RECIPE" --training.dataset local \
    --training.dataset_path "$AOGPT_DATA_DIR/train_corpus/enwiki2015_train_00.jsonl" \
    --training.global_batch_size "$FIRST_BATCH" --training.steps "$FIRST_STEPS" --metrics.log_freq "$FIRST_LOG" \
    --metrics.disable_color_printing --validation.no-enable --checkpoint.no-enable
unset TORCH_LOGS
if [ "$MODE" = gpu ]; then
    want bench && for batch in 1 8 32; do
        step "bench_sampler_b$batch" sh -c "$AOGPT_Q bench sampler --flavor small --n 256 --batch $batch --repeats 3 --json > $OUT/bench_sampler_b$batch.json"
    done
    # The sampler part: 180+45+170+45+40 s of timeouts (+5 s grace each) = 8.4 minutes at most (on
    # an H200, 2026-11-28: the tests 46 s with inductor's cache warm, past 115 s cold; 32 s for batch 1,
    # 131 s for batch 32, 70 of them the encoder, before the warm-up ran each AO variant three times and the
    # profile covered T=n/4 and n/16); sampler_compile (inductor's step, compiled for AO, AR
    # and the encoder, 35 s of compiling): 200+200 s more (2026-11-28: 107 s at batch 32 for T=n), so it is a call of its own.
    want sampler && timed pytest_graphed 180 "$PY" -m pytest -m gpu tests/gpu/test_graphed_sampler.py -q -p no:cacheprovider --junitxml "$OUT/pytest_graphed.xml"
    for run in "sampler 1024 1 45 on all profile" "sampler 1024 32 170 on all profile" "sampler 256 32 45 on all -" \
        "sampler_compile 1024 32 200 compile n profile" "sampler_compile 1024 1 200 compile all profile"; do
        read -r part n batch seconds graphs tvalues profile <<< "$run"
        name="bench_graphs_${graphs}_n${n}_b${batch}"
        extra=$([ "$profile" = profile ] && echo "--step-profile $OUT/step_profile_${graphs}_n${n}_b${batch}.json")
        want "$part" && timed "$name" "$seconds" sh -c "$AOGPT_Q bench sampler --flavor small --n $n --batch $batch --repeats 2 --graphs $graphs --T $tvalues $extra --json > $OUT/$name.json"
    done
    for batch_seconds in 32:90 1:90; do
        batch=${batch_seconds%:*}
        want flex_decode && timed "flex_decode_b$batch" "${batch_seconds#*:}" sh -c "$PY scripts/bench_flex_decode.py --batch $batch --json > $OUT/flex_decode_b$batch.json"
    done
    # sampler_autotune: the compiled T=n step at batch 32 with inductor's max-autotune (Triton GEMM templates
    # against cuBLAS for the 32-row products, 278 us of the 2026-11-28 step; flex's configs), its compile in the
    # log: whether `--graphs compile` should ask for it
    want sampler_autotune && timed bench_graphs_compile_autotune_n1024_b32 300 sh -c "TORCHINDUCTOR_MAX_AUTOTUNE=1 $AOGPT_Q bench sampler --flavor small --n 1024 --batch 32 --repeats 2 --graphs compile --T n --step-profile $OUT/step_profile_compile_autotune_n1024_b32.json --json > $OUT/bench_graphs_compile_autotune_n1024_b32.json"
    # The CPU row's requests (docs/benchmarks.md) with the static step replayed from CUDA graphs: the tiny model and
    # SDPA, so its shapes (3 batch sizes x the prefill widths) capture without a FlexAttention compile each and the
    # untimed pass and two rounds fit 40 s.
    want sampler && timed bench_requests 40 sh -c "$AOGPT_Q bench requests --flavor tiny --requests 256 --n 64 --batch-sizes 1,8,32 --repeats 2 --graphs on --backend sdpa --json > $OUT/bench_requests.json"
else
    want sampler && step bench_requests sh -c "$AOGPT_Q bench requests --flavor debugmodel --requests 12 --n 16 --batch-sizes 1,4 --repeats 2 --json > $OUT/bench_requests.json"
    want sampler && step bench_graphs_cpu sh -c "$AOGPT_Q bench sampler --flavor debugmodel --n 16 --batch 2 --repeats 1 --graphs static --step-profile $OUT/step_profile_cpu.json --json > $OUT/bench_graphs_static_cpu.json"
    want sampler_autotune && step bench_graphs_autotune_cpu sh -c "TORCHINDUCTOR_MAX_AUTOTUNE=1 $AOGPT_Q bench sampler --flavor debugmodel --n 16 --batch 2 --repeats 1 --graphs compile --T n --json > $OUT/bench_graphs_compile_autotune_cpu.json"
    want flex_decode && step flex_decode_cpu sh -c "$PY scripts/bench_flex_decode.py --batch 2 --heads 2 --slots 65 --filled 30 --splits default,2 --rounds 1 --calls 2 --json > $OUT/flex_decode_cpu.json"
    step bench_sampler_cpu sh -c "$AOGPT_Q bench sampler --flavor debugmodel --n 16 --batch 1 --repeats 2 --json > $OUT/bench_sampler_b1.json"
fi

"$PY" - "$OUT" "$MODE" "${STEPS[@]}" <<'PYEOF' | tee -a "$LOG"
import glob, json, os, sys, xml.etree.ElementTree as ET
out, mode, steps = sys.argv[1], sys.argv[2], [json.loads(s) for s in sys.argv[3:]]
import torch
summary = {"mode": mode, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "steps": steps}
for xml in sorted(glob.glob(os.path.join(out, "pytest_*.xml"))):
    root = ET.parse(xml).getroot()
    suite = root.find("testsuite") if root.find("testsuite") is not None else root
    summary[os.path.basename(xml)[:-4]] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
import importlib.metadata as md, re
summary["torchtitan"] = md.version("torchtitan")
rows, graph_breaks = [], 0  # the first steps of the recipe, read off the launcher's log lines
for line in open(os.path.join(out, "gpu_check.log"), errors="replace"):
    graph_breaks += "Graph break in user code" in line  # one per break (TORCH_LOGS=graph_breaks)
    m = re.search(r"(?<!validate )step:\s*(\d+)\s+loss:\s*([\d.]+)(?:.*?memory:\s*([\d.]+)GiB)?.*?tps:\s*([\d,]+)"
                  r"(?:.*?mfu:\s*([\d.]+)%)?", line)
    if m:
        rows.append({"step": int(m[1]), "loss": float(m[2]), "memory_gib": m[3] and float(m[3]),
                     "tps": int(m[4].replace(",", "")), "mfu_percent": m[5] and float(m[5])})
summary["first_steps_small" if mode == "gpu" else "first_steps_debug"] = rows
summary["graph_break_log_lines"] = graph_breaks  # TORCH_LOGS=graph_breaks during the training part
def last_json_lines(pattern):  # {file name: its last line as JSON, or None when it holds none}
    results = {}
    for path in sorted(glob.glob(os.path.join(out, pattern))):
        try:
            results[os.path.basename(path)[:-5]] = json.loads(open(path).read().strip().splitlines()[-1])
        except (ValueError, IndexError):
            results[os.path.basename(path)[:-5]] = None
    return results
summary["benches"] = last_json_lines("bench_*.json")
summary["step_profiles"] = {}  # the kernels of the sampler's replayed steps, per step and T (bench/decode_profile.py)
for path in sorted(glob.glob(os.path.join(out, "step_profile_*.json"))):
    by_t = json.load(open(path))["by_T"]
    keys = ("wall_us_per_step", "busy_us_per_step", "idle_us_per_step", "host_us_per_step", "launches_per_step")
    summary["step_profiles"][os.path.basename(path)[:-5]] = {t: {k: p[k] for k in keys} for t, p in by_t.items()}
summary["flex_decode"] = last_json_lines("flex_decode_*.json")  # per BlockMask layout and SPLIT_KV
summary["ok"] = all(s["rc"] == 0 for s in steps) and all(v is not None for v in summary["benches"].values())
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"summary: mode {mode}, ok {summary['ok']}, {len(steps)} steps -> {os.path.join(out, 'summary.json')}")
PYEOF
"$PY" -c "import json,sys; sys.exit(0 if json.load(open('$OUT/summary.json'))['ok'] else 1)"
