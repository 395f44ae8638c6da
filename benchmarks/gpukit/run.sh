#!/usr/bin/env bash
# On the lent GPU machine, from the repository root, with .gpukit/ carried beside the tree
# (the device tool: command `bash benchmarks/gpukit/run.sh`, carry [".gpukit"]). Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
exec python3 benchmarks/gpukit/kit.py --out "${OUT:?the device tool sets OUT}" "$@"
