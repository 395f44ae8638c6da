#!/usr/bin/env bash
# Late interaction served (#52): the gateway's POST /v1/rerank ranking by MaxSim on a multi-vector model,
# against MultiVectorEncoder in process on the same requests and CPU, one command from the repository root:
#
#   bash benchmarks/run_multivector_rerank.sh
#
# The model: the bundled all-MiniLM-L6-v2 encoder with a seeded 384 -> 128 ColBERT head (tests/
# tiny_multivector.make_minilm_colbert: queries expanded to 32 tokens, documents up to 256), built for
# python-ort fp32; one tritonserver and one gateway. `embtrt bench --rerank-documents` measures the gateway
# over HTTP (query + documents encoded by the front door, MaxSim in the gateway), then in-process
# MultiVectorEncoder (encode_query + encode_document batch 32 + similarity, fp32) on the same requests.
# Then benchmarks/multivector_memory.py: bursts of maximal legal /pooling requests, the gateway's and the
# tritonserver's resident memory idle and at peak, the request over the cap refused (memory.json).
# Environment: OUT, DOCS (default 32), CONCURRENCY (default 8), REQUESTS (default 100 per scenario),
# SKIP_BENCH (set: the memory part only).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
OUT=${OUT:-benchmarks/results/multivector-rerank-$(date -u +%Y%m%d)}
DOCS=${DOCS:-32}
CONCURRENCY=${CONCURRENCY:-8}
REQUESTS=${REQUESTS:-100}

MV="$WORK/minilm-colbert"
"$BIN/python" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from tiny_multivector import make_minilm_colbert as m; m(Path('$MV'))" > /dev/null 2>&1
"$BIN/embtrt" build "$MV" --out "$WORK/repo" --name minilm_colbert > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" minilm_colbert
start_gateway "$WORK/repo" "$G" "--route auto" "$WORK/gateway.log"
mkdir -p "$OUT"
CMD=("$BIN/embtrt" bench --openai-url "http://127.0.0.1:$GP/v1" --openai-model minilm_colbert --reference "$MV"
     --rerank-documents "$DOCS" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup 10 --out "$OUT")
echo "== ${CMD[*]}"
if [[ -z ${SKIP_BENCH:-} ]]; then "${CMD[@]}"; fi
GWPID=${PIDS[-1]}
echo "== memory under maximal legal requests (--max-vector-bytes 32 MiB, its default)"
"$BIN/python" benchmarks/multivector_memory.py --url "http://127.0.0.1:$GP" --model minilm_colbert --gateway-pid "$GWPID" \
    --triton-pid "$(pgrep -f "tritonserver --model-repository=$WORK/repo" | head -1)" --out "$OUT"
{
  echo "command: DOCS=$DOCS CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS bash benchmarks/run_multivector_rerank.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "target: embtrt gateway --route auto (MaxSim in the gateway) in front of one tritonserver (python-ort fp32 front door)"
  echo "load generator, gateway and tritonserver share the same $(nproc) cores; the in-process line runs after them alone"
} > "$OUT/machine.txt"
echo "== results in $OUT"
