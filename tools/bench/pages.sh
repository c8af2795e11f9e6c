#!/usr/bin/env bash
# Page fetch against its peers (tools/bench/pages.py; its options pass
# through). Builds ./xfer unless --xfer names a binary. With --transports rdma
# it runs pages.py in a tools/rdma-vm VM on rxe0 (--device siw0 for siw).
#
# Usage: tools/bench/pages.sh [--rounds N] [--transports tcp,shm|rdma] [--duration 2] [--device rxe0|siw0]
set -euo pipefail
cd "$(dirname "$0")/../.."
args=() rdma=0 dev=rxe0 have_xfer=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) dev=$2; shift 2; continue ;;
    --xfer) have_xfer=1 ;;
    --transports) case "${2:-}" in *rdma*) rdma=1 ;; esac ;;
  esac
  args+=("$1")
  shift
done
[ $have_xfer = 1 ] || go build -o xfer ./cmd/xfer
if [ $rdma = 1 ] && [ -z "${RDMA_VM:-}" ]; then
  case $dev in rxe0) vm=--rxe ;; siw0) vm=--siw ;; *) echo "pages.sh: --device $dev: want rxe0 or siw0" >&2; exit 2 ;; esac
  exec env XFER_DEVICE="$dev" tools/rdma-vm/rdma-vm $vm --timeout 1500 -- python3 tools/bench/pages.py --device "$dev" "${args[@]}"
fi
exec python3 tools/bench/pages.py "${args[@]}"
