#!/usr/bin/env bash
# Installs the peers (Debian packages) and runs the interleaved comparisons of
# the tcp and shm transports (tools/bench/peers.py; its options pass through).
# Builds ./xfer unless --xfer names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
for t in iperf3 qperf sockperf gcc python3; do command -v "$t" >/dev/null || need+=("$t"); done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
case " $* " in *" --xfer "*|*" --xfer="*) ;; *) go build -o xfer ./cmd/xfer ;; esac
exec python3 tools/bench/peers.py "$@"
