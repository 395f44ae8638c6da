# Shared by the benchmarks/run_*.sh scripts (sourced from the repository root, after `set -euo pipefail`):
# the project's venv, a scratch folder removed on exit, background processes (append their PIDs to PIDS)
# killed on exit, and free ports for servers.
BIN=$PWD/.venv/bin
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
port() { "$BIN/python" -c "from embtrt.serve.server import free_port; print(free_port())"; }
