#!/usr/bin/env bash
# The gateway's rerank route (POST /v1/rerank, Cohere's shape), gateways side by side, one command from
# the repository root:
#
#   GATEWAYS='@/tmp/base --route auto;--route auto' bash benchmarks/run_gateway_rerank.sh
#
# One tritonserver serving the reranker of benchmarks/run_rerank.sh (the bundled all-MiniLM-L6-v2
# encoder with a seeded one-label head, python-ort fp32) and one gateway per GATEWAYS entry (`;`
# between entries; an entry starting with @DIR runs DIR's code, e.g. a `git worktree add DIR BASE`:
# the A/B of a gateway change). `embtrt bench --rerank-documents` measures the front door over gRPC,
# then each gateway over HTTP, on the same pairs, in the order given: run it again with the entries
# swapped to see the order's effect. Environment: OUT, DOCS (default 1,10), CONCURRENCY (default 1,32),
# REQUESTS (default 200 per scenario).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/gateway-rerank-$(date -u +%Y%m%d)}
DOCS=${DOCS:-1,10}
CONCURRENCY=${CONCURRENCY:-1,32}
REQUESTS=${REQUESTS:-200}

CE="$WORK/minilm-ce"
"$BIN/python" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from tiny_models import make_minilm_cross_encoder as m; m(Path('$CE'))" > /dev/null 2>&1
"$BIN/embtrt" build "$CE" --out "$WORK/repo" --name minilm_ce > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" minilm_ce
IFS=';' read -r -a GWS <<< "${GATEWAYS:---route auto}"
PEERS=()
i=0
for opts in "${GWS[@]}"; do
  i=$((i + 1))
  start_gateway "$WORK/repo" "$G" "$opts" "$WORK/gateway-$i.log"
  PEERS+=(--openai-url "http://127.0.0.1:$GP/v1" --openai-model minilm_ce)
  echo "gateway$i: embtrt gateway $GW_OPTS${GW_CODE:+ (the code of $GW_CODE)} on http://127.0.0.1:$GP/v1"
done
mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --model "minilm_ce@127.0.0.1:$G" "${PEERS[@]}" --no-inprocess --rerank-documents "$DOCS"
     --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 10 --out "$OUT")
echo "== ${CMD[*]}"
"${CMD[@]}"
{
  echo "command: GATEWAYS='${GATEWAYS:-}' DOCS=$DOCS CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS bash benchmarks/run_gateway_rerank.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  i=0; for opts in "${GWS[@]}"; do i=$((i + 1)); echo "gateway$i (HTTP target #$i): embtrt gateway $opts"; done
  echo "load generator, gateways and tritonserver share the same $(nproc) cores"
} > "$OUT/machine.txt"
echo "== results in $OUT"
