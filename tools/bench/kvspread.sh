#!/usr/bin/env bash
# Installs etcd (Debian's etcd-server) and runs the KV spread comparison,
# three servers against one (tools/bench/kvspread.py; its options pass
# through). Builds ./xfer unless --xfer names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v etcd >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
fi
case " $* " in *" --xfer "*|*" --xfer="*) ;; *) go build -o xfer ./cmd/xfer ;; esac
exec python3 tools/bench/kvspread.py "$@"
