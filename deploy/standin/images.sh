#!/usr/bin/env bash
# The images of the local deployment test, built here with podman (no registry is reachable):
#   localhost/embtrt-debian:bookworm      Debian base (base.sh)
#   localhost/tritonserver-standin:2.51   base + nvidia-pytriton's tritonserver (for NGC's image)
#   localhost/embtrt-pool:standin         deploy/pool.Containerfile FROM the stand-in, SERVER_PYTHON=3.11
#   localhost/embtrt-gateway:standin      deploy/gateway.Containerfile FROM the base, from .whl/gateway
# usage: deploy/standin/images.sh [VENV]   (run from the checkout; VENV default .venv)
set -euo pipefail
venv=${1:-.venv}
here=$(cd "$(dirname "$0")" && pwd)
base=localhost/embtrt-debian:bookworm
bash "$here/base.sh" "$base"
site=$("$venv/bin/python" -c 'import pytriton, os; print(os.path.dirname(os.path.dirname(pytriton.__file__)))')
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/pytriton/tritonserver/python_backend_stubs"
cp -a "$site/pytriton/tritonserver/"{bin,backends,caches} "$ctx/pytriton/tritonserver/"
cp -a "$site/pytriton/tritonserver/python_backend_stubs/3.11" "$ctx/pytriton/tritonserver/python_backend_stubs/"
cp -a "$site/nvidia_pytriton.libs" "$ctx/"
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
podman build -q -f "$here/tritonserver.Containerfile" --build-arg BASE="$base" -t localhost/tritonserver-standin:2.51 "$ctx"
podman build -q -f "$here/../pool.Containerfile" --build-arg TRITON_IMAGE=localhost/tritonserver-standin:2.51 \
  --build-arg SERVER_PYTHON=3.11 -t localhost/embtrt-pool:standin "$here/.."
make -s gateway-wheels GATEWAY_PYTHON=3.11
podman build -q -f "$here/../gateway.Containerfile" --build-arg PYTHON_IMAGE="$base" -t localhost/embtrt-gateway:standin .whl/gateway
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'embtrt|tritonserver-standin'
