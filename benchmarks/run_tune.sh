#!/usr/bin/env bash
# Tuning MiniLM on this CPU, then the default vs the tuned repository in one alternating A/B run:
#
#   bash benchmarks/run_tune.sh
#
# Environment: SLO (p99 ms, default 500), BUDGET (minutes, default 6), OUT (results folder).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
SLO=${SLO:-500}
BUDGET=${BUDGET:-6}
OUT=${OUT:-benchmarks/results/tune-$(date -u +%Y%m%d)}
NAME=all_minilm_l6_v2
mkdir -p "$OUT"
"$BIN/embtrt" build --out "$WORK/default" > "$WORK/build.log"
"$BIN/embtrt" tune "$WORK/default" --slo-p99-ms "$SLO" --concurrency 1,8,32 --budget-min "$BUDGET" --requests 150 \
    --out "$OUT/tune" --apply-to "$WORK/tuned" | tee "$OUT/tune.log"
serve_dir "$WORK/default" "$NAME"; GD=$G; PD=$P
serve_dir "$WORK/tuned" "$NAME"; GT=$G; PT=$P
"$BIN/embtrt" bench --model "$NAME@127.0.0.1:$GD" --model "$NAME@127.0.0.1:$GT" --triton-pid=-"$PD" --triton-pid=-"$PT" \
    --no-inprocess --concurrency 1,8,32 --requests 300 --warmup 30 --only mixed,'<=32' --out "$OUT/ab" > "$OUT/ab.md"
{
  echo "command: SLO=$SLO BUDGET=$BUDGET bash benchmarks/run_tune.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "A/B targets: first = default build (127.0.0.1:$GD), second = tuned (127.0.0.1:$GT); each server paused while the other is measured"
} > "$OUT/machine.txt"
echo "== results in $OUT"
