#!/usr/bin/env bash
# Two rails against one: xfer bench over rdma between two processes in the
# same rdma-vm run, with one device (rxe0) and with two (rxe0 and a second
# rxe device on a dummy netdev), as interleaved rounds (one, two, two, one,
# ...). Prints each run's JSON line, labelled, and the medians.
#
# Usage (on the host; it builds xfer, then runs itself in the VM):
#   tools/bench/rails.sh [--rounds N] [--size SIZE] [--depth D] [--seconds S]
# Defaults: 3 rounds, 1MiB, depth 8, 3 s a run; WRITE and READ each round.
#
# What it measures: both rxe devices are software in one guest, driven by
# the same two vCPUs, and their packets never leave the guest; rxe under
# emulation is CPU-bound, so a second rail adds work for the same CPUs.
# The ratio says what a second software rail costs or gives there, not
# what two NICs give.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3 SIZE=1MiB DEPTH=8 SECONDS_=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2 ;;
    --size) SIZE=$2 ;;
    --depth) DEPTH=$2 ;;
    --seconds) SECONDS_=$2 ;;
    *) echo "rails.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done

if [ -z "${RDMA_VM:-}" ]; then
  mkdir -p bench-out
  go build -o bench-out/xfer-rails ./cmd/xfer
  exec tools/rdma-vm/rdma-vm --rxe --timeout 1500 -- env RAILS_XFER=bench-out/xfer-rails \
    tools/bench/rails.sh --rounds "$ROUNDS" --size "$SIZE" --depth "$DEPTH" --seconds "$SECONDS_"
fi

# In the VM: a second rxe device on a dummy netdev.
ip link add xfrail1 type dummy
ip addr add 10.0.9.1/24 dev xfrail1
ip link set xfrail1 up
rdma link add rxe9 type rxe netdev xfrail1
for _ in $(seq 100); do
  grep -q ACTIVE /sys/class/infiniband/rxe9/ports/1/state 2>/dev/null && break
  sleep 0.1
done
OUT=$(mktemp)
run() { # run LABEL DEVICES OP
  RDMA_DEVICE_NAME=$2 "$RAILS_XFER" bench --transport rdma --op "$3" --size "$SIZE" --depth "$DEPTH" \
    --duration "${SECONDS_}s" --json 2>>"$OUT.log" | grep '^{' | sed "s/^{/{\"label\":\"$1-$3\",/" | tee -a "$OUT"
}
for r in $(seq "$ROUNDS"); do
  for op in write read; do
    if [ $((r % 2)) = 1 ]; then
      run one rxe0 "$op"; run two rxe0,rxe9 "$op"
    else
      run two rxe0,rxe9 "$op"; run one rxe0 "$op"
    fi
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for label in sorted({r["label"] for r in rows}):
    v = [r["bytes_per_sec"] / 1e6 for r in rows if r["label"] == label]
    med[label] = statistics.median(v)
    print(f"{label:10s} median {med[label]:8.1f} MB/s, rounds: " + ", ".join(f"{x:.1f}" for x in v))
for op in ("write", "read"):
    print(f"two rails / one, {op}: {med['two-' + op] / med['one-' + op]:.2f}")
PY
