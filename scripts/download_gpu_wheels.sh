#!/usr/bin/env bash
# Download, here (with package-registry access), the cp312 manylinux wheels that the lent GPU machine's
# image lacks, into .whl/ (git-ignored), so a device run can carry them:
#
#   bash scripts/download_gpu_wheels.sh            # -> .whl/*.whl and .whl/SIZES
#   (device) carry [".whl"], then: bash scripts/gpu_check.sh "$OUT"
#
# The image has Python 3.12, torch 2.11 (CUDA 13), triton, tiktoken, safetensors, tensorboard,
# transformers, pyarrow, pandas, fsspec, xxhash, aiohttp, huggingface-hub, rich, pyyaml, ... (the
# device tool's KINDS.md). Missing: torchtitan, torchao, torchdata, tyro and its two helpers, datasets
# and the two of its needs the image does not hold, and this project. Every wheel is fetched without
# dependencies (torch must not be replaced), and the total must fit the carry limit (64 MiB with the
# working tree).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${WHEEL_DIR:-.whl}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mkdir -p "$OUT"
rm -f "$OUT"/*.whl
WHEELS=(
    torchtitan==0.2.2
    torchao==0.18.0
    torchdata==0.11.0
    tyro docstring-parser typeguard shtab
    datasets==5.2.0 dill multiprocess
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$OUT" "${WHEELS[@]}"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" .   # the project itself (pure Python)
du -b "$OUT"/*.whl | sort -n > "$OUT/SIZES"
total=$(awk '{s += $1} END {print s}' "$OUT/SIZES")
echo "$(ls "$OUT"/*.whl | wc -l) wheels, $((total / 1024 / 1024)) MiB in $OUT (carry limit 64 MiB with the tree)"
if [ "$total" -gt $((48 * 1024 * 1024)) ]; then
    echo "error: $OUT holds $((total / 1024 / 1024)) MiB; allowed: <= 48 MiB so the tree still fits in 64 MiB" >&2
    exit 2
fi
