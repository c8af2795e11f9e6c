#!/usr/bin/env bash
# check.sh: smoke test of the RDMA VM runner, used by `make verbs-test`.
#
# Boots one VM per soft-RDMA device, one at a time:
#   --rxe: ibv_devinfo -d rxe0 must show PORT_ACTIVE, then verbs_loopback
#          (2 RC QPs on rxe0, GID index 1: reg_mr, RDMA WRITE, READ,
#          SEND with immediate, data verified);
#   --siw: ibv_devinfo -d siw0 must show PORT_ACTIVE, then rping over rdma_cm
#          (siw/iWARP can only be connected through rdma_cm), data verified.
# Exits non-zero if either VM fails any of that. Works from any directory.
#
# Environment: CHECK_TIMEOUT (seconds per VM, default 300), and every
# RDMA_VM_* variable of rdma-vm.
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
VM=$here/rdma-vm
timeout=${CHECK_TIMEOUT:-300}

# the packages and the kernel (a no-op when they are there already)
"$VM" --setup

tmp=$(mktemp -d /tmp/rdma-vm-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# built on the host (gcc, libibverbs-dev: installed by the setup), run in the VM
gcc -O2 -Wall -o "$tmp/verbs_loopback" "$here/tests/verbs_loopback.c" -libverbs

# in the guest: the device's port must be active, then a short data test
cat >"$tmp/guest.sh" <<'GUEST'
#!/bin/bash
# $1 = device (rxe0 | siw0), $2 = directory with verbs_loopback
set -u
dev=$1 dir=$2
ibv_devinfo -d "$dev" || exit 1
ibv_devinfo -d "$dev" | grep -q 'state:[[:space:]]*PORT_ACTIVE' || { echo "FAIL: $dev port is not PORT_ACTIVE"; exit 1; }
echo "ok: $dev PORT_ACTIVE"
case "$dev" in
  rxe*)
    timeout 120 "$dir/verbs_loopback" "$dev" 1 4 || { echo "FAIL: verbs_loopback on $dev"; exit 1; } ;;
  siw*)
    ip=${RDMA_VM_IP:-10.0.0.1}
    rping -s -a "$ip" -C 10 -S 4096 -V >"$dir/rping-server.log" 2>&1 &
    srv=$!
    ok=0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      sleep 1
      if timeout 60 rping -c -a "$ip" -C 10 -S 4096 -V >"$dir/rping-client.log" 2>&1; then ok=1; break; fi
      kill -0 "$srv" 2>/dev/null || break   # server gone: no point in retrying
    done
    if [ "$ok" = 1 ]; then   # the server exits by itself after its 10 iterations
      for _ in $(seq 30); do kill -0 "$srv" 2>/dev/null || break; sleep 1; done
    fi
    kill "$srv" 2>/dev/null; wait "$srv"; src=$?
    if [ "$ok" != 1 ] || [ "$src" != 0 ]; then
      echo "FAIL: rping over rdma_cm on $dev (client ok=$ok, server rc=$src)"
      cat "$dir/rping-client.log" "$dir/rping-server.log"
      exit 1
    fi
    echo "rping over rdma_cm on $dev: 10 x 4 KiB, verified" ;;
esac
echo "PASS: $dev"
GUEST
chmod +x "$tmp/guest.sh"

rc=0
for mode in rxe siw; do
  echo "=== rdma-vm --$mode: ibv_devinfo + data path"
  t0=$(date +%s.%N)
  if "$VM" --"$mode" --timeout "$timeout" -- "$tmp/guest.sh" "${mode}0" "$tmp"; then
    r=ok
  else
    r="FAILED (exit $?)"; rc=1
  fi
  echo "=== rdma-vm --$mode: $r in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
done
exit $rc
