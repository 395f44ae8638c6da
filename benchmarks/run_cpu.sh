#!/usr/bin/env bash
# The recorded CPU comparison, reproducible by one command (from the repository root):
#
#   make bench                      # Triton (embtrt) vs sentence-transformers and ONNX Runtime in process
#   BENCH_INFINITY=1 make bench     # ... and an infinity-emb server, installed into benchmarks/.venv-infinity
#
# Environment: OUT (results folder), CONCURRENCY (default 1,8,32,64), REQUESTS (default 300),
# DELAY (max_queue_delay_us of the build, default 0), EXTRA_BUILD (more `embtrt build` options).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
OUT=${OUT:-benchmarks/results/cpu-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,8,32,64}
REQUESTS=${REQUESTS:-300}
DELAY=${DELAY:-0}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

port() { "$BIN/python" -c "from embtrt.serve import free_port; print(free_port())"; }
MODEL_DIR=$("$BIN/python" -c "from embtrt.modelinfo import default_model_path; print(default_model_path())")

echo "== building the default repository (max_queue_delay_us=$DELAY) into $WORK/repo"
"$BIN/embtrt" build --out "$WORK/repo" --max-queue-delay-us "$DELAY" ${EXTRA_BUILD:-} > "$WORK/build.log"
G=$(port); H=$(port); M=$(port)
"$BIN/embtrt" serve "$WORK/repo" --grpc-port "$G" --http-port "$H" --metrics-port "$M" --probe-interval 0 > "$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 120); do "$BIN/embtrt" probe --url "127.0.0.1:$G" > /dev/null 2>&1 && break; sleep 1; done
"$BIN/embtrt" probe --url "127.0.0.1:$G"
TRITON_PGID=$(pgrep -f "tritonserver --model-repository=$WORK/repo" | head -1)

PEER=()
if [ "${BENCH_INFINITY:-0}" = "1" ]; then
  IV=benchmarks/.venv-infinity
  if [ ! -x "$IV/bin/infinity_emb" ]; then
    echo "== installing infinity-emb 0.0.78 into $IV (its own environment)"
    python3 -m venv "$IV"
    "$IV/bin/pip" install -q torch==2.13.0
    "$IV/bin/pip" install -q "infinity-emb[server,torch]==0.0.78"
  fi
  I=$(port)
  HF_HUB_OFFLINE=1 "$IV/bin/infinity_emb" v2 --model-id "$MODEL_DIR" --engine torch --device cpu \
      --host 127.0.0.1 --port "$I" > "$WORK/infinity.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 180); do curl -sf "http://127.0.0.1:$I/models" > /dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$I/models" > /dev/null || { tail -20 "$WORK/infinity.log"; exit 1; }
  PEER=(--openai-url "http://127.0.0.1:$I" --openai-model "$MODEL_DIR" --openai-pid "${PIDS[-1]}")
fi

mkdir -p "$OUT"
# Each server is paused (SIGSTOP) while the other targets are measured: idle infinity-emb polls at
# ~65% of a core here, which would otherwise be taken from the server under test.
CMD=("$BIN/embtrt" bench --url "127.0.0.1:$G" --model all_minilm_l6_v2 --triton-pid=-$TRITON_PGID "${PEER[@]}"
     --ort-repo "$WORK/repo"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 30 --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: DELAY=$DELAY CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS BENCH_INFINITY=${BENCH_INFINITY:-0} bash benchmarks/run_cpu.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "isa: $(grep -o -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "memory: $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "load generator: the same machine (one Python asyncio process), sharing its cores with the servers"
  "$BIN/python" -c "import embtrt.build as b, json; print('versions:', json.dumps(b.versions()))"
  grep -E '^\[ok\]|^\[x\]' "$WORK/build.log" | grep -E "bucket|top-10|recall" | sed 's/^/build gate: /'
} > "$OUT/machine.txt"
echo "== results in $OUT"
