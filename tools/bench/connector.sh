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
. tools/bench/vmwrap.sh
vm_args connector.sh "$@"
if [ $rdma = 1 ] && [ -z "${RDMA_VM:-}" ]; then
  vm=$(vm_flag connector.sh)
  # The latency targets' test binary is built here: building in the VM is
  # slow under emulation.
  mkdir -p bench-out
  go test -c -o bench-out/connector.test ./connector
  exec env XFER_DEVICE="$dev" tools/rdma-vm/rdma-vm $vm --timeout 2900 -- python3 tools/bench/connector.py \
    --connector-test bench-out/connector.test "${args[@]}"
fi
exec python3 tools/bench/connector.py "${args[@]}"
