#!/usr/bin/env bash
# Gateway overhead, reproducible by one command (from the repository root):
#
#   bash benchmarks/run_gateway.sh
#
# One tritonserver (python-ort fp32 MiniLM) and two `embtrt gateway`s in front of it, token ids to
# the bucket encoders (--route ids, the default) and text to the NAME_<L> ensembles (--route text).
# `embtrt bench` measures direct gRPC to the front door against both gateways over OpenAI HTTP, on
# the same texts, alternating targets. The tritonserver is never paused (the gateways need it);
# each gateway is paused while the others are measured.
# Environment: OUT (results folder), CONCURRENCY (default 1,32), REQUESTS (default 400), ONLY (default <=32,mixed),
# EXTRA_BUILD (more `embtrt build` options).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
OUT=${OUT:-benchmarks/results/gateway-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,32}
REQUESTS=${REQUESTS:-400}
ONLY=${ONLY:-<=32,mixed}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
port() { "$BIN/python" -c "from embtrt.serve.server import free_port; print(free_port())"; }

NAME=all_minilm_l6_v2
"$BIN/embtrt" build --out "$WORK/repo" --max-queue-delay-us 0 ${EXTRA_BUILD:-} > "$WORK/build.log"
G=$(port); H=$(port); M=$(port)
"$BIN/embtrt" serve "$WORK/repo" --grpc-port "$G" --http-port "$H" --metrics-port "$M" --probe-interval 0 > "$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 120); do "$BIN/embtrt" probe --url "127.0.0.1:$G" --model "$NAME" > /dev/null 2>&1 && break; sleep 1; done
"$BIN/embtrt" probe --url "127.0.0.1:$G" --model "$NAME"
PEERS=()
for route in ids text; do
  P=$(port)
  "$BIN/embtrt" gateway "$WORK/repo" --triton "127.0.0.1:$G" --port "$P" --route "$route" > "$WORK/gateway-$route.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$P/health/ready" > /dev/null && break; sleep 0.5; done
  curl -sf "http://127.0.0.1:$P/health/ready"; echo
  PEERS+=(--openai-url "http://127.0.0.1:$P/v1" --openai-model "$NAME" --openai-pid "${PIDS[-1]}")
done
mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --model "$NAME@127.0.0.1:$G" "${PEERS[@]}" --no-inprocess
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 40 --only "$ONLY" --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: EXTRA_BUILD='${EXTRA_BUILD:-}' CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS ONLY='$ONLY' bash benchmarks/run_gateway.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "targets: triton = direct gRPC to the front door; openai #1 = gateway --route ids; openai #2 = gateway --route text"
  echo "load generator, gateways and tritonserver share the same $(nproc) cores"
} > "$OUT/machine.txt"
echo "== results in $OUT"
