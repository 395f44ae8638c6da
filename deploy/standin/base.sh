#!/usr/bin/env bash
# A Debian bookworm base image made here (no image registry is reachable): debootstrap minbase with
# Python 3.11 (and numpy 1.24 for Triton's Python-backend stubs), imported into podman.
# usage: base.sh [IMAGE]   (default localhost/embtrt-debian:bookworm; skipped when it exists)
set -euo pipefail
image=${1:-localhost/embtrt-debian:bookworm}
if podman image exists "$image"; then echo "$image exists"; exit 0; fi
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-numpy,libpython3.11,ca-certificates \
  bookworm "$dir/root" "$mirror" >"$dir/debootstrap.log" || { tail -20 "$dir/debootstrap.log"; exit 1; }
rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
tar -C "$dir/root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "$image: $(podman image inspect --format '{{.Size}}' "$image") bytes"
