#!/usr/bin/env bash
# LLM-style rerankers (#71): a Qwen3-Reranker-shaped model served (its prompt template, the instruction in it)
# against the model card's computation in process on the same pairs, at real-world prompt lengths:
#
#   bash benchmarks/run_llm_rerank.sh
#
# The model: tests/tiny_llm_rerankers.py's tiny seeded Qwen3ForCausalLM (2 layers, 32 wide, a byte-level BPE
# tokenizer trained on the corpus), max length 8192, built from its causal-LM folder (python-ort fp32, buckets
# 512,2048,8192) with a long instruction (about 150 tokens) as the build's default. Two scenarios: the corpus as
# it is (short documents), and documents of about 4K tokens (real corpus text joined). A tiny model: what is
# measured is the path (template tokens, padding, planning) and the attention over long prompts, not a 0.6B
# model's compute. Environment: OUT (results folder), DOCS (default 1,10), CONCURRENCY (default 1,4),
# REQUESTS (default 30 per scenario), TARGET (default python-ort; python-torch runs the PyTorch model in the
# front door), SCENARIOS (default "corpus long").
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/common.sh  # BIN, WORK, PIDS, cleanup on exit, port
TARGET=${TARGET:-python-ort}
SCENARIOS=${SCENARIOS:-corpus long}
OUT=${OUT:-benchmarks/results/llm-rerank-$TARGET-$(date -u +%Y%m%d)}
DOCS=${DOCS:-1,10}
CONCURRENCY=${CONCURRENCY:-1,4}
REQUESTS=${REQUESTS:-30}

M="$WORK/qwen3-reranker"
INSTRUCTION="Given a question asked by a user of a technical documentation search engine, judge whether the passage \
answers it directly, in part, or not at all; passages that only mention the same words without answering, that \
describe a different version of the software, or that are navigation text, changelogs or license notices do not \
meet the requirements, while passages with the steps, the option or the explanation the user needs do, even when \
they are long and the answer is in their middle. Prefer precise answers to general introductions."
"$BIN/python" - "$M" "$WORK" <<'PY' > /dev/null 2>&1
import json, sys
sys.path.insert(0, "tests")
from pathlib import Path
from tiny_llm_rerankers import make_qwen3_reranker
from tokenizers import Tokenizer
from embtrt.common.corpus import load_corpus
model, work = Path(sys.argv[1]), Path(sys.argv[2])
make_qwen3_reranker(model, max_length=8192)
corpus, tok = load_corpus(), Tokenizer.from_file(str(model / "tokenizer.json"))
docs = []
for j in range(24):   # each document real corpus text from its own starting point, cut near 4K tokens
    words, i = [], j * 11
    while len(tok.encode(" ".join(words)).ids) < 3900:
        words += corpus[i % len(corpus)].split()
        i += 1
    docs.append(" ".join(words))
# every document a long one; the queries are their first clauses (the bench's rule: the first 32 texts')
(work / "long.json").write_text(json.dumps(docs))
PY
echo "== building the LLM reranker from $M (long instruction as its default)"
"$BIN/embtrt" build "$M" --out "$WORK/repo" --name qwen3_rr --target "$TARGET" --buckets 512,2048,8192 --instruction "$INSTRUCTION" \
    > "$WORK/build.log" 2>&1
serve_dir "$WORK/repo" qwen3_rr
mkdir -p "$OUT"
for scenario in $SCENARIOS; do
  CORPUS_OPT=()
  [ "$scenario" = long ] && CORPUS_OPT=(--corpus "$WORK/long.json")
  CMD=("$BIN/embtrt" bench --model "qwen3_rr@127.0.0.1:$G" --rerank-documents "$DOCS" --concurrency "$CONCURRENCY"
       --requests "$REQUESTS" --warmup 3 --reference "$M" "${CORPUS_OPT[@]}" --out "$OUT/$scenario")
  echo "== $scenario: ${CMD[*]}"
  "${CMD[@]}"
done
{
  echo "command: DOCS=$DOCS CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS TARGET=$TARGET SCENARIOS=\"$SCENARIOS\" bash benchmarks/run_llm_rerank.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "load generator: the same machine (one Python asyncio process), sharing its cores with the server"
  echo "instruction: $INSTRUCTION"
  grep -E '^\[ok\]|^\[x\]|reading' "$WORK/build.log" | sed "s/^/build: /"
} > "$OUT/machine.txt"
echo "== results in $OUT"
