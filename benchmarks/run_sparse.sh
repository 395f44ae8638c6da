#!/usr/bin/env bash
# Sparse encoders side by side (issue #32 item 5), one command from the repository root:
#
#   bash benchmarks/run_sparse.sh     # embtrt (Triton) vs in-process SparseEncoder.encode_document
#
# The model: the bundled all-MiniLM-L6-v2 encoder as a SPLADE SparseEncoder with a seeded MLM head
# (tests/tiny_models.py make_minilm_splade; 22M parameters and a 30522-token output, the size of real
# MiniLM SPLADE models), built as a sparse encoder (python-ort fp32). Requests: real corpus texts,
# one per request, per length scenario ('<=32' short texts, 'mixed'), as documents.
# Environment: OUT (results folder), CONCURRENCY (default 1,8,32), REQUESTS (default 300),
# ONLY (default '<=32,mixed'), PER_REQUEST (texts per request, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/sparse-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,8,32}
REQUESTS=${REQUESTS:-300}
ONLY=${ONLY:-<=32,mixed}
PER_REQUEST=${PER_REQUEST:-1}

SE="$WORK/minilm-splade"
"$BIN/python" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from tiny_models import make_minilm_splade as m; m(Path('$SE'))" > /dev/null 2>&1
echo "== building the sparse encoder from $SE"
"$BIN/embtrt" build "$SE" --out "$WORK/repo" --name minilm_splade > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" minilm_splade

mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --sparse --model "minilm_splade@127.0.0.1:$G" --only "$ONLY" --concurrency "$CONCURRENCY"
     --requests "$REQUESTS" --warmup 20 --texts-per-request "$PER_REQUEST" --reference "$SE" --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS ONLY='$ONLY' PER_REQUEST=$PER_REQUEST bash benchmarks/run_sparse.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "load generator: the same machine (one Python asyncio process), sharing its cores with the server"
  grep -E '^\[ok\]|^\[x\]|run overhead' "$WORK/build.log" | sed "s/^/build: /"
} > "$OUT/machine.txt"
echo "== results in $OUT"
