#!/usr/bin/env bash
# VLM embedders served (#70 item 6): images/s of a VLM embedder over gRPC at concurrency 1 and 8 against the model
# card's computation in process on the same images and CPU, then the front door's memory under bursts of maximal
# legal requests; one command from the repository root:
#
#   bash benchmarks/run_vlm_bench.sh
#
# The model: a seeded Qwen3-VL-Embedding of a small shape (tests/tiny_vlm.make_vlm(shape="small"): width 256, 4
# layers in the language model and the vision tower, the image processor's max_pixels 256 merged patches of 32 x 32,
# so a page costs up to 256 image tokens; speed depends on the shape, not the weights), built for python-torch fp32
# (the kind's one target). The images: 32 seeded 850 x 1100 JPEGs (a letter page at 100 dpi: resized by the dynamic
# resolution to 448 x 576 pixels, 252 image tokens). `embtrt bench --vlm-images` sends 1 image per
# request; the in-process line is the model card's computation one image at a time. Then benchmarks/image_memory.py:
# bursts of requests of four 6000 x 6000 JPEGs (36 million pixels, the default limit) at concurrency 8, the
# tritonserver's resident memory idle and at peak (memory.json). Environment: OUT, CONCURRENCY (default 1,8),
# REQUESTS (default 48).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/vlm-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,8}
REQUESTS=${REQUESTS:-48}

MODEL="$WORK/vlm-small"
IMG="$WORK/images"
"$BIN/python" - <<PY > /dev/null 2>&1
import sys
sys.path.insert(0, "tests")
from pathlib import Path
from PIL import Image
from tiny_images import pattern
from tiny_vlm import make_vlm
make_vlm(Path("$MODEL"), shape="small")
out = Path("$IMG"); out.mkdir(parents=True)
for i in range(32):
    Image.fromarray(pattern(850, 1100, i)).save(out / f"{i:03d}.jpg", "JPEG", quality=90)
PY
"$BIN/embtrt" build "$MODEL" --out "$WORK/repo" --name vlm_small > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" vlm_small
mkdir -p "$OUT"
cp "$WORK/build.log" "$OUT/build.log"
CMD=("$BIN/embtrt" bench --url "127.0.0.1:$G" --model vlm_small --vlm-images "$IMG" --reference "$MODEL"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 4 --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
echo "== memory under bursts of maximal legal requests"
"$BIN/python" benchmarks/image_memory.py --url "127.0.0.1:$G" --model vlm_small --triton-pid "$P" \
    --output EMBEDDING --out "$OUT"
{
  echo "command: CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS bash benchmarks/run_vlm_bench.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "target: one tritonserver, the front door python-torch fp32 (decode, dynamic-resolution resize, the model in process)"
  echo "load generator and tritonserver share the same $(nproc) cores; the in-process line runs after them alone"
} > "$OUT/machine.txt"
echo "== results in $OUT"
