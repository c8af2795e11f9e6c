#!/usr/bin/env bash
# Installs the peers (Debian packages) and runs the interleaved comparisons.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
for t in iperf3 qperf gcc python3; do command -v "$t" >/dev/null || need+=("$t"); done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
[ -x ./xfer ] || go build -o xfer ./cmd/xfer
exec python3 tools/bench/peers.py "$@"
