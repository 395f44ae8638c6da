#!/usr/bin/env bash
# A large request (256 texts of 256 tokens) alone and with small requests sent while it runs, through the
# gateway at BASE (default HEAD, before the bulk-slot change) and the working tree, the same tritonserver:
#   BASE=<commit> ROUTE=frontdoor|auto bash benchmarks/results/bulk-slot-20261202/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
. benchmarks/common.sh
HERE=benchmarks/results/bulk-slot-20261202
BASE=${BASE:-HEAD}; ROUTE=${ROUTE:-frontdoor}
git worktree add -q --detach "$WORK/base" "$BASE"
PIDS+=()
trap 'cleanup; git worktree remove --force "$WORK/base" 2>/dev/null || true' EXIT
"$BIN/embtrt" build --out "$WORK/repo" --name minilm > "$WORK/build.log"
serve_dir "$WORK/repo" minilm
gw() {  # gw PYTHONPATH LABEL -> URL on stdout
  local p; p=$(port)
  PYTHONPATH="$1" "$BIN/python" -m embtrt.cli gateway "$WORK/repo" --port "$p" --triton "127.0.0.1:$G" --route "$ROUTE" \
    --request-timeout 900 > "$WORK/gw-$2.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$p/health/live" > /dev/null && break; sleep 1; done
  URL="http://127.0.0.1:$p"
}
gw "$WORK/base/builder:$WORK/base/python_backend" base; UB=$URL
gw "$PWD/builder:$PWD/python_backend" head; UH=$URL
lscpu | grep -m1 "Model name" || true
"$BIN/python" "$HERE/measure.py" --gateway "base=$UB" --gateway "head=$UH" --model minilm \
  --rounds "${ROUNDS:-3}" --out "$HERE/results-$ROUTE.json" | tee "$HERE/results-$ROUTE.txt"
