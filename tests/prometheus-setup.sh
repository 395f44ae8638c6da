#!/usr/bin/env bash
# Prometheus and promtool from Debian's package, for tests/integration/test_observability.py (as root; make
# test-all runs it). Installed without its recommends and without starting its service: the test starts its
# own Prometheus on a loopback port. Idempotent.
set -euo pipefail
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  policy=/usr/sbin/policy-rc.d ours=
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; ours=1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [[ -n $ours ]]; then rm -f "$policy"; fi
fi
prometheus --version 2>&1 | head -1
