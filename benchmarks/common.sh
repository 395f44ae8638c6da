# Shared by the benchmarks/run_*.sh scripts (sourced from the repository root, after `set -euo pipefail`):
# the project's venv, a scratch folder removed on exit, background processes (append their PIDs to PIDS)
# killed on exit, free ports for servers, serving a built repository (serve_dir) and a gateway in front of
# it (start_gateway).
BIN=$PWD/.venv/bin
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
port() { "$BIN/python" -c "from embtrt.serve.server import free_port; print(free_port())"; }
# serve_dir DIR MODEL: `embtrt serve DIR` on free ports, waiting until MODEL answers a probe (the
# script fails if it never does); sets G (its gRPC port), S (the embtrt serve PID, also in PIDS) and
# P (the tritonserver's process group, for pausing it while other targets are measured).
serve_dir() {
  local h m
  G=$(port); h=$(port); m=$(port)
  "$BIN/embtrt" serve "$1" --grpc-port "$G" --http-port "$h" --metrics-port "$m" --health-port 0 --probe-interval 0 \
      > "$WORK/serve-$(basename "$1").log" 2>&1 &
  S=$!
  PIDS+=("$S")
  for _ in $(seq 1 120); do "$BIN/embtrt" probe --url "127.0.0.1:$G" --model "$2" > /dev/null 2>&1 && break; sleep 1; done
  "$BIN/embtrt" probe --url "127.0.0.1:$G" --model "$2"
  P=$(pgrep -f "tritonserver --model-repository=$1" | head -1)
}
# start_gateway REPO TRITON_GRPC_PORT ENTRY LOG: `embtrt gateway REPO` on a free port in front of the
# tritonserver at TRITON_GRPC_PORT, its options from ENTRY (one GATEWAYS entry: an entry starting with
# @DIR runs DIR's code, e.g. a `git worktree add DIR BASE`, for the A/B of a gateway change), waiting
# until /health/ready answers; sets GP (its port), GW_OPTS (the options without @DIR) and GW_CODE (DIR
# or ""); its PID is the last of PIDS.
# An A/B should run BOTH sides from worktrees (@BASE and @HEAD): a gateway from the installed checkout
# measured 0.93 of a worktree's req/s with the same code (benchmarks/results/gateway-aa-head-worktree-vs-installed-20261207).
start_gateway() {
  local opts=$3
  GP=$(port)
  GW_CODE=""
  if [[ $opts == @* ]]; then GW_CODE=${opts%% *}; GW_CODE=${GW_CODE#@}; opts=${opts#"@$GW_CODE"}; fi
  GW_OPTS=$opts
  # shellcheck disable=SC2086
  PYTHONPATH=${GW_CODE:+$GW_CODE/builder:$GW_CODE/python_backend} \
    "$BIN/embtrt" gateway "$1" --triton "127.0.0.1:$2" --port "$GP" $opts > "$4" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$GP/health/ready" > /dev/null && break; sleep 0.5; done
  curl -sf "http://127.0.0.1:$GP/health/ready"; echo
}
