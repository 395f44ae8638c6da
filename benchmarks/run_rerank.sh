#!/usr/bin/env bash
# Rerankers side by side (issue #31 item 6), one command from the repository root:
#
#   bash benchmarks/run_rerank.sh                     # embtrt (Triton) vs in-process CrossEncoder.predict
#   RERANK_INFINITY=1 bash benchmarks/run_rerank.sh   # ... and infinity-emb's /rerank (benchmarks/.venv-infinity)
#
# The model: the bundled all-MiniLM-L6-v2 encoder with a seeded one-label head (tests/tiny_models.py
# make_minilm_cross_encoder; 22M parameters, the size of ms-marco-MiniLM-L-6-v2), built as a reranker
# (python-ort fp32), as python-openvino fp32, and with RERANK_BF16=1 as python-openvino bf16 where OpenVINO
# reports bf16 on the CPU (the reduced-precision gate). Requests: one query and K documents of mixed lengths (real corpus texts).
# Environment: OUT (results folder), DOCS (default 1,10,32,100), CONCURRENCY (default 1,8),
# REQUESTS (default 60 per scenario).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/rerank-$(date -u +%Y%m%d)}
DOCS=${DOCS:-1,10,32,100}
CONCURRENCY=${CONCURRENCY:-1,8}
REQUESTS=${REQUESTS:-60}

CE="$WORK/minilm-ce"
"$BIN/python" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from tiny_models import make_minilm_cross_encoder as m; m(Path('$CE'))" > /dev/null 2>&1
echo "== building the reranker from $CE"
"$BIN/embtrt" build "$CE" --out "$WORK/repo" --name minilm_ce > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" minilm_ce
TRITON_PG=$P
MODELS=(--model "minilm_ce@127.0.0.1:$G")
# OpenVINO fp32 (python-openvino; the gate's 1e-4 bound) where openvino imports: in process on the gate's
# pairs it ran 1.35-1.4x ONNX Runtime fp32 on a 2-core AVX-512 Xeon
if "$BIN/python" -c "import openvino" 2>/dev/null; then
  echo "== building the OpenVINO fp32 reranker (python-openvino)"
  "$BIN/embtrt" build "$CE" --out "$WORK/repo-ov" --name minilm_ce_ov --target python-openvino > "$WORK/build-ov.log" 2>&1
  serve_dir "$WORK/repo-ov" minilm_ce_ov
  MODELS+=(--model "minilm_ce_ov@127.0.0.1:$G")
  TRITON_PG="$TRITON_PG $P"
fi
# the bf16 variant (python-openvino, reduced-precision gate) with RERANK_BF16=1 where OpenVINO reports
# bf16 on this CPU (measured 0.72x fp32 on AVX-512 bf16 without AMX: off by default)
if [ "${RERANK_BF16:-0}" = "1" ] && "$BIN/python" -c "import openvino as ov, sys; sys.exit('BF16' not in ov.Core().get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))" 2>/dev/null; then
  echo "== building the bf16 reranker (python-openvino)"
  "$BIN/embtrt" build "$CE" --out "$WORK/repo-bf16" --name minilm_ce_bf16 --target python-openvino --precision bf16 > "$WORK/build-bf16.log" 2>&1
  serve_dir "$WORK/repo-bf16" minilm_ce_bf16
  MODELS+=(--model "minilm_ce_bf16@127.0.0.1:$G")
  TRITON_PG="$TRITON_PG $P"
fi

mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench "${MODELS[@]}" --rerank-documents "$DOCS" --concurrency "$CONCURRENCY"
     --requests "$REQUESTS" --warmup 3 --reference "$CE" --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"

if [ "${RERANK_INFINITY:-0}" = "1" ]; then
  IV=${IV:-benchmarks/.venv-infinity}
  if [ ! -x "$IV/bin/infinity_emb" ]; then
    echo "== installing infinity-emb 0.0.78 into $IV (its own environment)"
    python3 -m venv "$IV"
    "$IV/bin/pip" install -q torch==2.13.0
    "$IV/bin/pip" install -q "infinity-emb[server,torch]==0.0.78"
  fi
  for pg in $TRITON_PG; do kill -STOP -- "-$pg" 2>/dev/null || kill -STOP "$pg" || true; done   # idle, but out of the way
  I=$(port)
  HF_HUB_OFFLINE=1 "$IV/bin/infinity_emb" v2 --model-id "$CE" --engine torch --device cpu \
      --host 127.0.0.1 --port "$I" > "$WORK/infinity.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 180); do curl -sf "http://127.0.0.1:$I/models" > /dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$I/models" > /dev/null || { tail -20 "$WORK/infinity.log"; exit 1; }
  CMD=("$BIN/embtrt" bench --rerank-documents "$DOCS" --concurrency "$CONCURRENCY" --requests "$REQUESTS"
       --warmup 3 --no-inprocess --openai-url "http://127.0.0.1:$I" --openai-model "$CE" --out "$OUT/infinity")
  echo "== ${CMD[*]}"
  "${CMD[@]}"
  for pg in $TRITON_PG; do kill -CONT -- "-$pg" 2>/dev/null || kill -CONT "$pg" || true; done
fi
{
  echo "command: DOCS=$DOCS CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS RERANK_INFINITY=${RERANK_INFINITY:-0} RERANK_BF16=${RERANK_BF16:-0} bash benchmarks/run_rerank.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "load generator: the same machine (one Python asyncio process), sharing its cores with the servers"
  grep -E '^\[ok\]|^\[x\]|run overhead' "$WORK/build.log" | sed "s/^/build: /"
  [ -f "$WORK/build-ov.log" ] && grep -E '^\[ok\]|^\[x\]|run overhead|OpenVINO' "$WORK/build-ov.log" | sed "s/^/build ov: /"
  [ -f "$WORK/build-bf16.log" ] && grep -E '^\[ok\]|^\[x\]|run overhead|OpenVINO' "$WORK/build-bf16.log" | sed "s/^/build bf16: /"
} > "$OUT/machine.txt"
echo "== results in $OUT"
