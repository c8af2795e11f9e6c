#!/usr/bin/env bash
# The connector's `xfer transfer` against `xfer bench` (tools/bench/connector.py;
# its options pass through). Builds ./xfer unless --xfer names a binary.
# With --transports rdma it runs connector.py in a tools/rdma-vm VM on rxe0
# (or on siw0 with --device siw0, an option of this wrapper only).
#
# Usage: tools/bench/connector.sh [--rounds N] [--transports tcp,shm|rdma] [--size-mb 256]
#                                 [--transfers 20] [--device rxe0|siw0] [--xfer PATH] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
args=() rdma=0 dev=rxe0 have_xfer=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || { echo "connector.sh: --device needs a value" >&2; exit 2; }; dev=$2; shift 2; continue ;;
    --device=*) dev=${1#--device=}; shift; continue ;;
    --xfer|--xfer=*) have_xfer=1 ;;
    --transports) case "${2:-}" in *rdma*) rdma=1 ;; esac ;;
    --transports=*) case "$1" in *rdma*) rdma=1 ;; esac ;;
  esac
  args+=("$1")
  shift
done
[ $have_xfer = 1 ] || go build -o xfer ./cmd/xfer
if [ $rdma = 1 ] && [ -z "${RDMA_VM:-}" ]; then
  case $dev in
    rxe0) vm=--rxe ;;
    siw0) vm=--siw ;;
    *) echo "connector.sh: --device $dev: want rxe0 or siw0" >&2; exit 2 ;;
  esac
  # The latency targets' test binary is built here: building in the VM is
  # slow under emulation.
  mkdir -p bench-out
  go test -c -o bench-out/connector.test ./connector
  exec env XFER_DEVICE="$dev" tools/rdma-vm/rdma-vm $vm --timeout 2900 -- python3 tools/bench/connector.py \
    --connector-test bench-out/connector.test "${args[@]}"
fi
exec python3 tools/bench/connector.py "${args[@]}"
