#!/usr/bin/env bash
# The README's first command: a short CPU training run of the debug recipe on real Wikipedia text,
# then checkpoint conversion, sampling and a zero-shot perplexity check. Outputs go to outputs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=outputs/demo
rm -rf "$OUT"
export TIKTOKEN_CACHE_DIR="${TIKTOKEN_CACHE_DIR:-$(realpath ../shared/data/tiktoken_cache)}"
export AOGPT_DATA_DIR="${AOGPT_DATA_DIR:-$(realpath ../shared/data)}"

echo "== 1/4 train: train_configs/aogpt_debug.toml (60 steps, CPU) -> $OUT/train"
python -m aogpt_plugin.train --job.config_file train_configs/aogpt_debug.toml --job.dump_folder "$OUT/train"

echo "== 2/4 convert the last checkpoint (EMA weights) -> $OUT/model"
aogpt convert "$OUT/train/checkpoint" "$OUT/model" --weights ema

echo "== 3/4 sample 2 sequences of 64 tokens in 16 steps, random order"
aogpt sample --model "$OUT/model" --num-samples 2 --length 64 --steps 16 --seed 0

echo "== 4/4 zero-shot perplexity on 4 WikiText-2 test chunks, left to right and any order"
aogpt eval ppl --model "$OUT/model" --dataset wikitext2 --order l2r --seq-len 128 --max-chunks 4
aogpt eval ppl --model "$OUT/model" --dataset wikitext2 --order random --seq-len 128 --max-chunks 4

echo "== done. TensorBoard: tensorboard --logdir $OUT/train/tb"
