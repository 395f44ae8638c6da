#!/usr/bin/env bash
# Images served (#53 item 6): images/s of a text-and-image model over gRPC at concurrency 1 and 32 against
# SentenceTransformer.encode in process on the same images and CPU, then the front door's memory under a
# burst of maximal legal images; one command from the repository root:
#
#   bash benchmarks/run_image_bench.sh
#
# The model: a seeded CLIP of openai/clip-vit-base-patch32's shape (tests/tiny_images.make_clip(shape=
# "vit-b-32"): ViT-B/32 vision tower, 12-layer 512-wide text tower, 512-d projection; speed depends on the
# shape, not the weights), built for python-ort fp32. The images: 64 seeded 640 x 480 JPEGs (a photo's size).
# `embtrt bench --images` sends 1 image per request at each concurrency; the in-process line is
# SentenceTransformer.encode of the same images as data URIs (its own decode and preprocessing, batch 32).
# Then benchmarks/image_memory.py: bursts of requests of four 6000 x 6000 JPEGs (36 million pixels, the
# default limit) at concurrency 8, the tritonserver's resident memory idle and at peak (memory.json).
# Environment: OUT, CONCURRENCY (default 1,32), REQUESTS (default 96 per scenario), SKIP_BENCH (memory only).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/images-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,32}
REQUESTS=${REQUESTS:-96}

CLIP="$WORK/clip-b32"
IMG="$WORK/images"
"$BIN/python" - <<PY > /dev/null 2>&1
import io, sys
sys.path.insert(0, "tests")
from pathlib import Path
import numpy as np
from PIL import Image
from tiny_images import make_clip, pattern
make_clip(Path("$CLIP"), shape="vit-b-32")
out = Path("$IMG"); out.mkdir(parents=True)
for i in range(64):
    Image.fromarray(pattern(640, 480, i)).save(out / f"{i:03d}.jpg", "JPEG", quality=90)
PY
"$BIN/embtrt" build "$CLIP" --out "$WORK/repo" --name clip_b32 > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" clip_b32
mkdir -p "$OUT"
cp "$WORK/build.log" "$OUT/build.log"
CMD=("$BIN/embtrt" bench --url "127.0.0.1:$G" --model clip_b32 --images "$IMG" --reference "$CLIP"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 8 --out "$OUT")
echo "== ${CMD[*]}"
if [[ -z ${SKIP_BENCH:-} ]]; then "${CMD[@]}"; fi
echo "== memory under a burst of maximal legal images"
"$BIN/python" benchmarks/image_memory.py --url "127.0.0.1:$G" --model clip_b32 --triton-pid "$P" --out "$OUT"
{
  echo "command: CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS bash benchmarks/run_image_bench.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "target: one tritonserver, the front door python-ort fp32 (2 instances: decode, preprocess, both towers in process)"
  echo "load generator and tritonserver share the same $(nproc) cores; the in-process line runs after them alone"
} > "$OUT/machine.txt"
echo "== results in $OUT"
