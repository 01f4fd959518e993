#!/usr/bin/env bash
# One command that checks every CUDA path and records GPU throughput (issue 15), or proves itself on a CPU.
#
#   GPU_CHECK_PLAN=A bash scripts/gpu_check.sh OUTDIR   # a named plan (below); writes OUTDIR/gpu_check.log, summary.json
#   bash scripts/gpu_check.sh OUTDIR                    # every part (more than one 10-minute call holds)
#   GPU_CHECK_DRY_RUN=1 GPU_CHECK_PLAN=A bash scripts/gpu_check.sh OUTDIR   # list the GPU mode's steps, run none
#
# On the lent GPU machine (device tool; carry [".whl"] made by scripts/download_gpu_wheels.sh): the plans, sent
# back to back, each one call under 10 minutes with every step under its own timeout (docs/benchmarks.md,
# "Next GPU run"; tests/scripts/test_gpu_check.py adds each plan's timeouts up to at most 540 s):
#   A (~6-7 min)  decode_tests sampler_compile_b32 flex_decode_b32 sampler_compile_b1: the split-argmax and
#                 FlexDecoding CUDA tests; `--graphs compile` at n=1024, batch 32, T=n with its step profile; the
#                 decode-attention bench at batch 32; `--graphs compile` at batch 1 over every T (AR beside it, no
#                 encoder) with its profiles
#   B (~4-5 min)  train_bench train_profile train_batch for `small` with `--compile model`: batch 16, its profile,
#                 batch 64
#   C (~2 min)    sampler_decode_attention: batch 32 compiled again with GPU_CHECK_DECODE_ATTENTION (plan A's
#                 flex_decode_b32.json names the fastest setting as "best") end to end
#   C-autotune    sampler_autotune: AO alone, compiled at batch 32, T=n, with inductor's GEMM autotuning
#                 (TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1)
# Steps: install the carried wheels where a package is missing (never replacing torch), print the device, then
# the parts asked for (GPU_CHECK_PLAN, or GPU_CHECK_PARTS, default all). Parts: tests (`pytest -m gpu`: bf16 +
# FSDP2/NCCL + compile + AC training with exact resume and convert, float8, the sampler and eval on CUDA);
# decode_tests (the split-argmax, FlexDecoding and decode-attention tests of tests/gpu/test_graphed_sampler.py);
# train_bench, train_profile, first_steps (the group `training`); train_batch (the profiled flavor at batch 64);
# `bench` (train_bench, train_batch, train_profile and the dynamic sampler's bench); sampler (the graphed-step
# CUDA tests, `--graphs on` rows with profiles, `aogpt bench requests`); sampler_compile_b32, sampler_compile_b1
# (the group sampler_compile); flex_decode_b32, flex_decode_b1 (the group flex_decode); sampler_autotune;
# sampler_decode_attention and train_compile_model only when named.
# GPU_CHECK_TRAIN_FLAVORS="small" limits the GPU's training benches to those flavors (default: small medium);
# GPU_CHECK_TRAIN_COMPILE=model compiles the whole model in every training bench instead of each block.
# Without CUDA the same parts run in CPU mode at tiny sizes (debugmodel/tiny, the debug recipe): the gpu tests
# skip. The JSON lines become docs rows with `python scripts/update_benchmarks_doc.py OUTDIR/bench_*.json`.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${GPU_CHECK_DRY_RUN:-}
case "${GPU_CHECK_PLAN:-}" in
    "") PLAN_PARTS="" ;;
    A) PLAN_PARTS="decode_tests sampler_compile_b32 flex_decode_b32 sampler_compile_b1" ;;
    B) PLAN_PARTS="train_bench train_profile train_batch"
       export GPU_CHECK_TRAIN_FLAVORS=${GPU_CHECK_TRAIN_FLAVORS:-small} GPU_CHECK_TRAIN_COMPILE=${GPU_CHECK_TRAIN_COMPILE:-model} ;;
    C) PLAN_PARTS="sampler_decode_attention" ;;
    C-autotune) PLAN_PARTS="sampler_autotune" ;;
    *) echo "error: GPU_CHECK_PLAN=${GPU_CHECK_PLAN} is not a plan; allowed: A, B, C, C-autotune" >&2; exit 2 ;;
esac
if [ -n "$PLAN_PARTS" ] && [ -n "${GPU_CHECK_PARTS:-}" ]; then
    echo "error: GPU_CHECK_PLAN=${GPU_CHECK_PLAN} and GPU_CHECK_PARTS=${GPU_CHECK_PARTS} both given; allowed: one" >&2
    exit 2
fi
PARTS=" ${PLAN_PARTS:-${GPU_CHECK_PARTS:-tests first_steps bench sampler sampler_compile sampler_autotune flex_decode}} "
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
step() {  # step NAME CMD...: run, log, record the exit status (a dry run lists it untimed: "-")
    local name=$1; shift
    if [ -n "$DRY" ]; then echo "step $name - $*"; return; fi
    say "$name: $*"
    "$@" >>"$LOG" 2>&1
    local rc=$?
    STEPS+=("{\"step\": \"$name\", \"rc\": $rc}")
    say "$name: exit $rc"
}
timed() {  # timed NAME SECONDS CMD...: step under its own timeout (exit 124 when it ran out; 5 s more to be killed)
    local name=$1 seconds=$2; shift 2
    if [ -n "$DRY" ]; then echo "step $name $seconds $*"; return; fi
    step "$name" timeout --kill-after=5 "$seconds" "$@"
}

MISSING='import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("torchtitan", "torchao", "torchdata", "datasets", "tyro")))'
if [ -n "$DRY" ] || { [ -d .whl ] && ! "$PY" -c "$MISSING"; }; then  # a dry run counts it: a fresh machine lacks them
    timed install_wheels 30 "$PY" -m pip install -q --no-index --no-deps .whl/*.whl
fi
"$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('aogpt_plugin') is None)" || timed install_project 60 "$PY" -m pip install -q --no-deps --no-build-isolation -e .
if [ -n "$DRY" ]; then
    MODE=gpu
else
    MODE=$("$PY" -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')")
    "$PY" -c "
import torch, platform
print('torch', torch.__version__, 'python', platform.python_version())
print('device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" | tee -a "$LOG"
fi

want tests && step pytest_gpu "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider --ignore tests/gpu/test_graphed_sampler.py --junitxml "$OUT/pytest_gpu.xml"
# decode_tests (plan A): the CUDA tests of what the next rows measure: the compiled draw's split argmax, FlexDecoding
# as the lowered kernel, the decode-attention setting in it and every setting's tokens alike
want decode_tests && timed pytest_decode 100 "$PY" -m pytest -m gpu tests/gpu/test_graphed_sampler.py -q -p no:cacheprovider \
    -k "split_argmax or flex_decoding or decode_attention" --junitxml "$OUT/pytest_decode.xml"
AOGPT=("$PY" -m aogpt_plugin.cli)
AOGPT_Q=$(printf '%q ' "${AOGPT[@]}")
# The training part (issue 37). GPU: the rows of docs/benchmarks.md's training section; 120+140+110+150 s
# of timeouts (+5 s kill grace each) = 9 minutes at most. CPU: the same commands at tiny sizes.
COMPILE="--compile${GPU_CHECK_TRAIN_COMPILE:+ $GPU_CHECK_TRAIN_COMPILE}"  # plan B: --compile model
if [ "$MODE" = gpu ]; then
    TRAIN_FLAVORS=(small:200 medium:140)  # small: both loss paths (the default's decision), twice the variants
    TRAIN_BATCH=16 LARGE_BATCH=64 LARGE_SECONDS=150  # the recipes' micro-batch (8 was host-bound); train_batch: llm.c's for GPT-2 124M
    # a training flag every bench of the check should run with (a loss path, say) goes into TRAIN_SIZE and PROFILE_SIZE
    TRAIN_SIZE="--seq-len 1024 --batch $TRAIN_BATCH --dtype bfloat16 $COMPILE"
    PROFILE_FLAVOR=small PROFILE_SIZE="--seq-len 1024 --batch 16 --steps 5 --dtype bfloat16 $COMPILE" PROFILE_SECONDS=110
    # The paper's small recipe for its first steps on one GPU (issue 27): local Wikipedia shard instead of the
    # hub's OpenWebText (no network there), one 16 x 1024 micro-batch per step, validation and checkpoints off.
    FIRST_RECIPE=aogpt_small FIRST_BATCH=16 FIRST_STEPS=60 FIRST_LOG=5 FIRST_SECONDS=150
else
    TRAIN_FLAVORS=(debugmodel:300)
    TRAIN_BATCH=2 LARGE_BATCH=4 LARGE_SECONDS=300
    TRAIN_SIZE="--seq-len 32 --batch $TRAIN_BATCH --steps 2 --rounds 2 --warmup 1"
    PROFILE_FLAVOR=debugmodel PROFILE_SIZE="--seq-len 32 --batch 2 --steps 2 --warmup 1" PROFILE_SECONDS=300
    FIRST_RECIPE=aogpt_debug FIRST_BATCH=8 FIRST_STEPS=2 FIRST_LOG=1 FIRST_SECONDS=300
fi
if [ "$MODE" = gpu ] && [ -n "${GPU_CHECK_TRAIN_FLAVORS:-}" ]; then  # e.g. "small": the benches of those flavors only
    wanted=" $GPU_CHECK_TRAIN_FLAVORS " kept=()
    for f in "${TRAIN_FLAVORS[@]}"; do [[ "$wanted" == *" ${f%:*} "* ]] && kept+=("$f"); done
    TRAIN_FLAVORS=("${kept[@]}")
fi
export TORCH_LOGS=${TORCH_LOGS:-graph_breaks}  # a graph break in the compiled step shows in the log
if want train_bench training bench; then
    for flavor_seconds in "${TRAIN_FLAVORS[@]}"; do
        flavor=${flavor_seconds%:*}
        timed "bench_train_$flavor" "${flavor_seconds#*:}" sh -c "$AOGPT_Q bench train --flavor $flavor $TRAIN_SIZE --loss-path logits,fused --json > $OUT/bench_train_$flavor.json"
    done
fi
# train_batch (in `bench`, not in `training`): the profiled flavor at a larger micro-batch, whether it pays
want train_batch bench && timed "bench_train_${PROFILE_FLAVOR}_b$LARGE_BATCH" "$LARGE_SECONDS" \
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
# The sampler rows. GPU: `small` at n=1024, the step compiled; CPU: debugmodel (tiny where a row attends with flex:
# heads of 32) at n=16, the static step eager (inductor's CPU compile of each shape would take minutes of the suite).
if [ "$MODE" = gpu ]; then
    N=1024 SMALL=small FLEX_SMALL=small STEP=compile FLEX_STEP="--graphs compile" REPEATS=2
    FLEX_DECODE=(32:"--batch 32 --splits default,4,8,16 --stages default,3 --warps default,4 --budget 90":120
                 1:"--batch 1 --splits default,4,8,16 --stages default,3 --warps default --budget 60":90)
else
    N=16 SMALL=debugmodel FLEX_SMALL=tiny STEP=static FLEX_STEP="--graphs static --backend flex" REPEATS=1
    FLEX_DECODE=(32:"--batch 2 --heads 2 --slots 128 --filled 30 --splits default,2 --stages default --warps default,4 --rounds 1 --calls 2":300
                 1:"--batch 1 --heads 2 --slots 128 --filled 30 --splits default,2 --stages default --warps default --rounds 1 --calls 2":300)
fi
B32=$([ "$MODE" = gpu ] && echo 32 || echo 2)
if [ "$MODE" = gpu ]; then
    want bench && for batch in 1 8 32; do
        step "bench_sampler_b$batch" sh -c "$AOGPT_Q bench sampler --flavor small --n 256 --batch $batch --repeats 3 --json > $OUT/bench_sampler_b$batch.json"
    done
    # The sampler part: 180+45+170+45+40 s of timeouts (+5 s grace each) = 8.4 minutes at most (on
    # an H200, 2026-11-28: the tests 46 s with inductor's cache warm, past 115 s cold; 32 s for batch 1,
    # 131 s for batch 32, 70 of them the encoder, before the encoder was timed over 16 forwards a round)
    want sampler && timed pytest_graphed 180 "$PY" -m pytest -m gpu tests/gpu/test_graphed_sampler.py -q -p no:cacheprovider --junitxml "$OUT/pytest_graphed.xml"
    for run in "sampler 1024 1 45 on all" "sampler 1024 32 170 on all" "sampler 256 32 45 on all"; do
        read -r part n batch seconds graphs tvalues <<< "$run"
        name="bench_graphs_${graphs}_n${n}_b${batch}"
        extra=$([ "$n" = 1024 ] && echo "--step-profile $OUT/step_profile_${graphs}_n${n}_b${batch}.json")
        want "$part" && timed "$name" "$seconds" sh -c "$AOGPT_Q bench sampler --flavor small --n $n --batch $batch --repeats 2 --graphs $graphs --T $tvalues $extra --json > $OUT/$name.json"
    done
    # The CPU row's requests (docs/benchmarks.md) with the static step replayed from CUDA graphs: the tiny model and
    # SDPA, so its shapes (3 batch sizes x the prefill widths) capture without a FlexAttention compile each and the
    # untimed pass and two rounds fit 40 s.
    want sampler && timed bench_requests 40 sh -c "$AOGPT_Q bench requests --flavor tiny --requests 256 --n 64 --batch-sizes 1,8,32 --repeats 2 --graphs on --backend sdpa --json > $OUT/bench_requests.json"
else
    want sampler && step bench_requests sh -c "$AOGPT_Q bench requests --flavor debugmodel --requests 12 --n 16 --batch-sizes 1,4 --repeats 2 --json > $OUT/bench_requests.json"
    want sampler && step bench_graphs_cpu sh -c "$AOGPT_Q bench sampler --flavor debugmodel --n 16 --batch 2 --repeats 1 --graphs static --step-profile $OUT/step_profile_cpu.json --json > $OUT/bench_graphs_static_cpu.json"
    want bench sampler && step bench_sampler_cpu sh -c "$AOGPT_Q bench sampler --flavor debugmodel --n 16 --batch 1 --repeats 2 --json > $OUT/bench_sampler_b1.json"
fi
# sampler_compile (plan A): inductor's step captured, at batch 32 for T=n (the encoder/AO goal, with the default
# decode attention end to end; 2026-11-28: 107 s, 70 of them the encoder's rounds) and at batch 1 over every T (the
# batch-1 goal and AR/AO(T=n/4), what --graphs auto should pick; AR beside it, no encoder); each with its profile
for run in "sampler_compile_b32 $B32 110 n ar,encoder" "sampler_compile_b1 1 150 all ar"; do
    read -r part batch seconds tvalues baselines <<< "$run"
    name="graphs_${STEP}_n${N}_b${batch}"
    want "$part" sampler_compile && timed "bench_$name" "$seconds" sh -c "$AOGPT_Q bench sampler --flavor $SMALL --n $N --batch $batch --repeats $REPEATS --graphs $STEP --T $tvalues --baselines $baselines --step-profile $OUT/step_profile_${STEP}_n${N}_b${batch}.json --json > $OUT/bench_$name.json"
done
# flex_decode (plan A at batch 32): the T=n step's decode attention per --decode-attention setting (layout x SPLIT_KV x
# num_stages x num_warps; scripts/bench_flex_decode.py), timed from CUDA graphs; its "best" is plan C's setting
for spec in "${FLEX_DECODE[@]}"; do
    batch=${spec%%:*} rest=${spec#*:}
    want "flex_decode_b$batch" flex_decode && timed "flex_decode_b$batch" "${rest##*:}" sh -c "$PY scripts/bench_flex_decode.py ${rest%:*} --json > $OUT/flex_decode_b$batch.json"
done
# sampler_decode_attention (plan C, by name): batch 32 compiled again with the setting plan A's bench found fastest
if want sampler_decode_attention; then
    SETTING=${GPU_CHECK_DECODE_ATTENTION:?plan C needs GPU_CHECK_DECODE_ATTENTION (plan A: flex_decode_b32.json, "best")}
    timed bench_graphs_decode_attention 110 sh -c "$AOGPT_Q bench sampler --flavor $FLEX_SMALL --n $N --batch $B32 --repeats $REPEATS $FLEX_STEP --T n --decode-attention $SETTING --json > $OUT/bench_graphs_decode_attention_n${N}_b${B32}.json"
fi
# sampler_autotune (plan C-autotune): AO alone, compiled at batch 32 for T=n, inductor's Triton GEMM templates tried
# against cuBLAS for its 32-row products (278 us of the 2026-11-28 step) and nothing else autotuned; the compile in the log
want sampler_autotune && timed bench_graphs_autotune_gemm 170 sh -c "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 $AOGPT_Q bench sampler --flavor $SMALL --n $N --batch $B32 --repeats $REPEATS --graphs compile --T n --baselines none --json > $OUT/bench_graphs_compile_autotune_gemm_n${N}_b${B32}.json"
[ -n "$DRY" ] && exit 0

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
summary["flex_decode"] = last_json_lines("flex_decode_*.json")  # per decode-attention setting; "best": the fastest
summary["ok"] = all(s["rc"] == 0 for s in steps) and all(v is not None for v in summary["benches"].values())
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"summary: mode {mode}, ok {summary['ok']}, {len(steps)} steps -> {os.path.join(out, 'summary.json')}")
PYEOF
"$PY" -c "import json,sys; sys.exit(0 if json.load(open('$OUT/summary.json'))['ok'] else 1)"
