#!/usr/bin/env bash
# The throughput cost of the request options, reproducible by one command (from the repository root):
#
#   bash benchmarks/run_options.sh
#
# One tritonserver serving the default MiniLM build; `embtrt bench` sends the same requests to its
# front door without options and with each option set (prompt by input_type, a Matryoshka width,
# truncation from the start, int8 and binary vectors, everything at once), alternating targets in
# one run. Environment: OUT, CONCURRENCY (default 1,32), REQUESTS (default 400), ONLY (default <=32,mixed).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/options-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,32}
REQUESTS=${REQUESTS:-400}
ONLY=${ONLY:-<=32,mixed}

NAME=all_minilm_l6_v2
"$BIN/embtrt" build --out "$WORK/repo" --max-queue-delay-us 0 > "$WORK/build.log"
serve_dir "$WORK/repo" "$NAME"
U="$NAME@127.0.0.1:$G"
mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --model "$U" --model "$U?input_type=query" --model "$U?dimensions=128"
     --model "$U?truncate=START" --model "$U?embedding_type=int8" --model "$U?embedding_type=ubinary"
     --model "$U?input_type=query&dimensions=128&truncate=START&embedding_type=int8"
     --cpu-pid "tritonserver=$S" --no-inprocess
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 40 --only "$ONLY" --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS ONLY='$ONLY' bash benchmarks/run_options.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "every target is the same front door of one server; only the request options differ"
} > "$OUT/machine.txt"
echo "== results in $OUT"
