#!/usr/bin/env bash
# Installs Redis (Debian's redis-server and redis-tools) and runs the KV
# comparison of docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
fi
go build -o xfer ./cmd/xfer
exec python3 tools/bench/kv.py "$@"
