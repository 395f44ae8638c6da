#!/usr/bin/env bash
# Gateway overhead, reproducible by one command (from the repository root):
#
#   bash benchmarks/run_gateway.sh
#
# One tritonserver (python-ort fp32 MiniLM) and gateways in front of it: GATEWAYS lists their options,
# one gateway each (default: the gateway as built, `--route auto`, which on one server sends texts to
# the front door; `--route ids`, token ids to the bucket encoders as with length pools, coalesced;
# and `--route ids --coalesce-us 0`, one upstream call per request).
# `embtrt bench` measures direct gRPC to the front door against the gateways over OpenAI HTTP, on
# the same texts, alternating targets, with the CPU time per request of the tritonserver process
# tree and of each gateway (--cpu-pid), and of the load generator itself. The tritonserver is never
# paused (the gateways need it); each gateway is paused while the others are measured.
# A GATEWAYS entry may start with @DIR (a checkout of another commit, e.g. `git worktree add DIR BASE`): that
# gateway runs DIR's code (PYTHONPATH), the A/B of a gateway change against its base on one server.
# Environment: OUT (results folder), CONCURRENCY (default 1,32), REQUESTS (default 400), ONLY (default <=32,mixed),
# ROUNDS (default 1: each scenario's requests in that many interleaved rounds, targets taking turns, pooled),
# EXTRA_BUILD (more `embtrt build` options).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/gateway-$(date -u +%Y%m%d)}
CONCURRENCY=${CONCURRENCY:-1,32}
REQUESTS=${REQUESTS:-400}
ONLY=${ONLY:-<=32,mixed}
ROUNDS=${ROUNDS:-1}

NAME=all_minilm_l6_v2
"$BIN/embtrt" build --out "$WORK/repo" --max-queue-delay-us 0 ${EXTRA_BUILD:-} > "$WORK/build.log"
serve_dir "$WORK/repo" "$NAME"
PEERS=(--cpu-pid "tritonserver=$S")
IFS=';' read -r -a GWS <<< "${GATEWAYS:---route auto;--route ids;--route ids --coalesce-us 0}"
i=0
for opts in "${GWS[@]}"; do
  i=$((i + 1))
  start_gateway "$WORK/repo" "$G" "$opts" "$WORK/gateway-$i.log"
  PEERS+=(--openai-url "http://127.0.0.1:$GP/v1" --openai-model "$NAME" --openai-pid "${PIDS[-1]}"
          --cpu-pid "gateway$i=${PIDS[-1]}")
  echo "gateway$i: embtrt gateway $GW_OPTS${GW_CODE:+ (the code of $GW_CODE)}"
done
mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --model "$NAME@127.0.0.1:$G" "${PEERS[@]}" --no-inprocess
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --rounds "$ROUNDS" --warmup 40 --only "$ONLY" --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: EXTRA_BUILD='${EXTRA_BUILD:-}' GATEWAYS='${GATEWAYS:-}' CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS ROUNDS=$ROUNDS ONLY='$ONLY' bash benchmarks/run_gateway.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  i=0; for opts in "${GWS[@]}"; do i=$((i + 1)); echo "gateway$i (openai target #$i): embtrt gateway $opts"; done
  echo "CPU ms/req: process-tree CPU time (user+system) over warm-up and measured requests, divided by their number"
  echo "load generator, gateways and tritonserver share the same $(nproc) cores"
} > "$OUT/machine.txt"
echo "== results in $OUT"
