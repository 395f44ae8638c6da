#!/usr/bin/env bash
# Podman on this kind of machine (root, hybrid cgroups): podman + runc from Debian, with runc as the
# runtime (crun refuses hybrid cgroups) and no default ulimits (setting RLIMIT_NPROC is refused).
# Idempotent; refuses to edit a containers.conf it did not write.
set -euo pipefail
need=()
for c in podman runc debootstrap; do command -v "$c" >/dev/null || need+=("$c"); done
if ((${#need[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
fi
conf=/etc/containers/containers.conf
marker="# written by embtrt deploy/standin/podman-setup.sh"
if [[ ! -e $conf ]]; then
  mkdir -p /etc/containers
  printf '%s\n[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' "$marker" > "$conf"
elif ! grep -qF "$marker" "$conf"; then
  grep -q '^default_ulimits *= *\[\]' "$conf" && grep -q '^runtime *= *"runc"' "$conf" || {
    echo "$conf exists without default_ulimits = [] and runtime = \"runc\": add them ([containers] / [engine])" >&2; exit 2; }
fi
podman --version
