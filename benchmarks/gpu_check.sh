#!/usr/bin/env bash
# make gpu-check: on a GPU host with TensorRT, in one command:
#   1. tests/gpu (engine builds per bucket, plan-vs-ONNX parity; serving when EMBTRT_TRITONSERVER
#      points at a tritonserver with the TensorRT backend),
#   2. a short table: per bucket and batch size, plan latency and the plan's cosine to the ONNX model.
# Without CUDA/TensorRT the tests skip with the concrete reason and the table says why it cannot run.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
"$BIN/python" -m pytest tests/gpu -m gpu -rs -q
rc=$?
"$BIN/python" benchmarks/gpu_table.py || rc=1
exit $rc
