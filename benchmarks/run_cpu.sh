#!/usr/bin/env bash
# The recorded CPU comparison, reproducible by one command (from the repository root):
#
#   make bench                      # Triton (embtrt) vs sentence-transformers and ONNX Runtime in process
#   BENCH_INFINITY=1 make bench     # ... and an infinity-emb server, installed into benchmarks/.venv-infinity
#
# Environment: OUT (results folder), CONCURRENCY (default 1,8,32,64), REQUESTS (default 300),
# DELAY (max_queue_delay_us of the build, default 0), EXTRA_BUILD (more `embtrt build` options),
# ONLY (bucket labels to run, e.g. '<=32,mixed'; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/cpu-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,8,32,64}
REQUESTS=${REQUESTS:-300}
DELAY=${DELAY:-0}

MODEL_DIR=$("$BIN/python" -c "from embtrt.reference.modelinfo import default_model_path; print(default_model_path())")

# serve_repo NAME [build options...]: build a repository of the default model named NAME, serve it
# on free ports; sets G_<NAME> (gRPC port) and P_<NAME> (tritonserver process group).
serve_repo() {
  local name=$1; shift
  echo "== building $name ($*, max_queue_delay_us=$DELAY) into $WORK/$name"
  "$BIN/embtrt" build --out "$WORK/$name" --name "$name" --max-queue-delay-us "$DELAY" "$@" > "$WORK/build-$name.log"
  serve_dir "$WORK/$name" "$name"
  printf -v "G_$name" '%s' "$G"
  printf -v "P_$name" '%s' "$P"
}

# The exact variant (python-ort fp32) and the fast one that passes the same gate
# (python-openvino bf16, where OpenVINO reports bf16 on this CPU).
serve_repo all_minilm_l6_v2 --target python-ort --precision fp32 ${EXTRA_BUILD:-}
TRITON=(--model "all_minilm_l6_v2@127.0.0.1:$G_all_minilm_l6_v2" --triton-pid=-"$P_all_minilm_l6_v2")
INPROC=(--ort-repo "$WORK/all_minilm_l6_v2")
if "$BIN/python" -c "import openvino as ov, sys; sys.exit('BF16' not in ov.Core().get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))" 2>/dev/null; then
  serve_repo all_minilm_l6_v2_bf16 --target python-openvino --precision bf16 ${EXTRA_BUILD:-}
  TRITON+=(--model "all_minilm_l6_v2_bf16@127.0.0.1:$G_all_minilm_l6_v2_bf16" --triton-pid=-"$P_all_minilm_l6_v2_bf16")
  INPROC+=(--engine-repo "$WORK/all_minilm_l6_v2_bf16")
else
  echo "== no bf16 variant: OpenVINO is missing or reports no bf16 on this CPU"
fi

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
CMD=("$BIN/embtrt" bench "${TRITON[@]}" "${PEER[@]}" "${INPROC[@]}"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 30 --out "$OUT" ${ONLY:+--only "$ONLY"})
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: DELAY=$DELAY CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS BENCH_INFINITY=${BENCH_INFINITY:-0} bash benchmarks/run_cpu.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "isa: $(grep -o -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "memory: $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "load generator: the same machine (one Python asyncio process), sharing its cores with the servers"
  "$BIN/python" -c "import embtrt.export.encoders as b, json; print('versions:', json.dumps(b.versions()))"
  for f in "$WORK"/build-*.log; do
    n=$(basename "$f" .log); n=${n#build-}
    grep -E '^\[ok\]|^\[x\]|run overhead' "$f" | grep -E "bucket|top-10|recall|overhead" | sed "s/^/build gate ($n): /"
  done
} > "$OUT/machine.txt"
echo "== results in $OUT"
