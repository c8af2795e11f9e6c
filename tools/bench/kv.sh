#!/usr/bin/env bash
# Installs Redis (Debian's redis-server and redis-tools) and runs the KV
# comparison (tools/bench/kv.py; its options pass through). Builds ./xfer
# unless --xfer names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
fi
case " $* " in *" --xfer "*|*" --xfer="*) ;; *) go build -o xfer ./cmd/xfer ;; esac
exec python3 tools/bench/kv.py "$@"
