#!/usr/bin/env bash
# Page fetch against its peers (tools/bench/pages.py; its options pass
# through). Builds ./xfer unless --xfer names a binary. With --transports rdma
# it runs pages.py in a tools/rdma-vm VM on rxe0 (--device siw0 for siw).
#
# Usage: tools/bench/pages.sh [--rounds N] [--transports tcp,shm|rdma] [--duration 2] [--device rxe0|siw0]
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/vmwrap.sh
vm_args pages.sh "$@"
if [ $rdma = 1 ] && [ -z "${RDMA_VM:-}" ]; then
  vm=$(vm_flag pages.sh)
  exec env XFER_DEVICE="$dev" tools/rdma-vm/rdma-vm $vm --timeout 1500 -- python3 tools/bench/pages.py --device "$dev" "${args[@]}"
fi
exec python3 tools/bench/pages.py "${args[@]}"
