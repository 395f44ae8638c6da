#!/usr/bin/env bash
# Page images served (#70 item 6): pages/s of a page-image retriever over gRPC at concurrency 1 and 8 against
# ColPaliForRetrieval in process on the same pages and CPU, then the front door's memory under bursts of maximal
# legal requests; one command from the repository root:
#
#   bash benchmarks/run_pages_bench.sh
#
# The model: a seeded ColPali of a small shape (tests/tiny_pages.make_colpali(shape="small"): SigLIP 224 / 16 ->
# 196 image tokens, Gemma and SigLIP 256 wide, 4 layers each, 128-wide token vectors; 208 positions a page; speed
# depends on the shape, not the weights), built for python-torch fp32 (the kind's one target). The pages: 32 seeded
# 850 x 1100 JPEGs (a letter page at 100 dpi). `embtrt bench --pages` sends 1 page per request; the in-process line
# is ColPaliForRetrieval on its processor's output (PIL backend, batch 8). Then benchmarks/image_memory.py: bursts of
# requests of four 6000 x 6000 JPEGs (36 million pixels, the default limit) at concurrency 8, the tritonserver's
# resident memory idle and at peak (memory.json). Environment: OUT, CONCURRENCY (default 1,8), REQUESTS (default 48).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/pages-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,8}
REQUESTS=${REQUESTS:-48}

MODEL="$WORK/colpali-small"
IMG="$WORK/pages"
"$BIN/python" - <<PY > /dev/null 2>&1
import sys
sys.path.insert(0, "tests")
from pathlib import Path
from PIL import Image
from tiny_images import pattern
from tiny_pages import make_colpali
make_colpali(Path("$MODEL"), shape="small")
out = Path("$IMG"); out.mkdir(parents=True)
for i in range(32):
    Image.fromarray(pattern(850, 1100, i)).save(out / f"{i:03d}.jpg", "JPEG", quality=90)
PY
"$BIN/embtrt" build "$MODEL" --out "$WORK/repo" --name colpali_small --target python-torch > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" colpali_small
mkdir -p "$OUT"
cp "$WORK/build.log" "$OUT/build.log"
CMD=("$BIN/embtrt" bench --url "127.0.0.1:$G" --model colpali_small --pages "$IMG" --reference "$MODEL"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 4 --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
echo "== memory under bursts of maximal legal requests"
"$BIN/python" benchmarks/image_memory.py --url "127.0.0.1:$G" --model colpali_small --triton-pid "$P" \
    --output TOKEN_EMBEDDINGS --out "$OUT"
{
  echo "command: CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS bash benchmarks/run_pages_bench.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "target: one tritonserver, the front door python-torch fp32 (decode, resize, the model in process)"
  echo "load generator and tritonserver share the same $(nproc) cores; the in-process line runs after them alone"
} > "$OUT/machine.txt"
echo "== results in $OUT"
