#!/usr/bin/env bash
# Front door instances at concurrency 1 and 32: the default (2) against one, both python-ort fp32, delay 0, one embtrt bench run
#   bash benchmarks/results/fd-instances-20261202/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
. benchmarks/common.sh
OUT=${OUT:-benchmarks/results/fd-instances-$(date -u +%Y%m%d)}
"$BIN/embtrt" build --out "$WORK/two" --name two --max-queue-delay-us 0 --target python-ort --precision fp32 > "$WORK/b2.log"
serve_dir "$WORK/two" two; G2=$G; P2=$P
"$BIN/embtrt" build --out "$WORK/one" --name one --max-queue-delay-us 0 --target python-ort --precision fp32 --front-door-instances 1 > "$WORK/b1.log"
serve_dir "$WORK/one" one; G1=$G; P1=$P
grep -h "run overhead" "$WORK"/b*.log || true
"$BIN/embtrt" bench --model "two@127.0.0.1:$G2" --triton-pid=-"$P2" --model "one@127.0.0.1:$G1" --triton-pid=-"$P1" \
  --ort-repo "$WORK/two" --concurrency 1,32 --requests 300 --warmup 30 --out "$OUT" --only '<=32,mixed'
