#!/usr/bin/env bash
# Long texts on CPU: ONNX Runtime's fused attention against the export as it is (#67 / #71's long inputs),
# reproducible by one command (from the repository root):
#
#   bash benchmarks/run_long_fused.sh
#
# A seeded tiny 16K BERT (tests/tiny_models.make_bert_16k: hidden 32, 2 heads, 2 layers), built twice for
# python-ort fp32, the default (export/fuse.py: ONNX Runtime's fused Attention) and --no-fuse-attention (the
# exported graph), gated on a quarter of the bundled corpus and the three long texts; each served in turn and
# measured by `embtrt bench` on real texts of 4,997 / 12,000 / 16,383 tokens (one text per request, concurrency 1),
# with the CPU time and peak memory of the tritonserver tree (--cpu-pid) and in-process sentence-transformers
# (PyTorch, SDPA) beside it. Environment: OUT (results folder), REQUESTS (default 6 per text).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, serve_dir
OUT=${OUT:-benchmarks/results/long-fused-$(date -u +%Y%m%d)}
REQUESTS=${REQUESTS:-6}

"$BIN/python" - "$WORK" <<'PY'
import json
import sys
from pathlib import Path

sys.path.insert(0, "tests")
from tiny_models import long_texts, make_bert_16k  # noqa: E402

from embtrt.common.corpus import load_corpus  # noqa: E402

work = Path(sys.argv[1])
model = make_bert_16k(work / "b16k", heads=2, layers=2)
longs = long_texts(model / "tokenizer.json")
(work / "longs.json").write_text(json.dumps(longs))
(work / "gate.json").write_text(json.dumps(load_corpus()[::4] + longs))
PY
for side in fused export; do
  extra=()
  [ "$side" = export ] && extra=(--no-fuse-attention)
  "$BIN/embtrt" build "$WORK/b16k" --out "$WORK/repo-$side" --name b16k --target python-ort --corpus "$WORK/gate.json" \
      "${extra[@]}" > "$WORK/build-$side.log" 2>&1
  grep -h "attention" "$WORK/build-$side.log" || echo "$side: attention as exported"
  serve_dir "$WORK/repo-$side" b16k
  "$BIN/embtrt" bench --url "127.0.0.1:$G" --model b16k --reference "$WORK/b16k" --corpus "$WORK/longs.json" \
      --buckets 8192,12000,16384 --concurrency 1 --requests "$REQUESTS" --warmup 1 --cpu-pid "tritonserver=$S" \
      $([ "$side" = export ] && echo --no-inprocess) --out "$OUT/$side" > /dev/null
  kill "$S"
  wait "$S" 2>/dev/null || true
done
echo "results: $OUT/fused/results.md, $OUT/export/results.md"
