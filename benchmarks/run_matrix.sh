#!/usr/bin/env bash
# The long-context stress matrix (`embtrt matrix`) of MiniLM and of the tiny 16K-token model
# on this machine, reproducible by one command (from the repository root):
#
#   bash benchmarks/run_matrix.sh
#
# Each model is built with the defaults, served by embtrt matrix itself (explicit model control), and
# for every token budget its configs are reloaded through Triton's repository API before its cells.
# Environment: OUT (results folder), ONLY (minilm, b16k or both, default both), REQUESTS (per cell).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/matrix-$(date -u +%Y%m%d)}
ONLY=${ONLY:-minilm,b16k}
mkdir -p "$OUT"
if [[ ",$ONLY," == *",minilm,"* ]]; then
  "$BIN/embtrt" build --out "$WORK/minilm" > "$WORK/build-minilm.log"
  CMD=("$BIN/embtrt" matrix "$WORK/minilm" --max-batch-tokens 512,1024,2048,4096,8192 --only 32,128,256
       --concurrency 1,8,32,64 --requests "${REQUESTS:-64}" --texts-per-band 16 --preempt-repeats 3 --pools --out "$OUT/minilm")
  echo "== ${CMD[*]}"
  "${CMD[@]}" > /dev/null 2> "$OUT/minilm.log"
fi
if [[ ",$ONLY," == *",b16k,"* ]]; then
  # tests/tiny_models.py: a tiny BERT (hidden 32, 2 layers) taking 16,384 tokens, MiniLM's tokenizer
  "$BIN/python" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from tiny_models import make_bert_16k; make_bert_16k(Path('$WORK/b16k-model'))" > /dev/null 2>&1
  "$BIN/embtrt" build "$WORK/b16k-model" --out "$WORK/b16k" > "$WORK/build-b16k.log"
  CMD=("$BIN/embtrt" matrix "$WORK/b16k" --max-batch-tokens 4096,16384,32768 --only 32,2048,8192
       --concurrency 1,8,64 --requests "${REQUESTS:-24}" --texts-per-band 8 --preempt-repeats 2 --pools --out "$OUT/b16k")
  echo "== ${CMD[*]}"
  "${CMD[@]}" > /dev/null 2> "$OUT/b16k.log"
fi
{
  echo "command: ONLY='$ONLY' REQUESTS='${REQUESTS:-}' bash benchmarks/run_matrix.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; bf16: $(grep -q avx512_bf16 /proc/cpuinfo && echo avx512_bf16 || echo no)"
  echo "load generator and tritonserver share the same $(nproc) cores"
} > "$OUT/machine.txt"
echo "== results in $OUT"
