#!/usr/bin/env bash
# xfer's rdma transport against perftest, on the same SoftRoCE device (rxe0)
# in the same rdma-vm run, as interleaved rounds (peer, xfer, peer, xfer, ...).
# The results go to docs/BENCHMARKS.md ("Issue 3 targets").
#
# Usage (on the host; it builds xfer and regmr, then re-runs itself in the VM):
#   tools/bench/verbs.sh [--rounds N] [--depths "32 16 64"] [--events] [--always] [--lat-only]
# or directly (build ./xfer and bench-out/regmr first):
#   tools/rdma-vm/rdma-vm --rxe --timeout 1500 -- tools/bench/verbs.sh [options]
# Defaults: 3 rounds, depth 32, no event-channel runs.
#
# Each round runs, in this order (server and client of perftest both in the
# VM, the client to $RDMA_VM_IP = 10.0.0.1, the VM's own dummy0 address;
# XFER_DEVICE=rxe0 so that xfer never picks siw0):
#   ib_write_bw -d rxe0 -x 1 -s 65536 -D 2
#   xfer bench --transport rdma --op write --size 64KiB --duration 2s --depth D --json   (each D)
#   ib_read_bw  -d rxe0 -x 1 -s 65536 -D 2
#   xfer bench --transport rdma --op read  --size 64KiB --duration 2s --depth D --json   (each D)
#   ib_write_lat -d rxe0 -x 1 -s 8 -n 1000
#   xfer bench --transport rdma --op write --size 8 --depth 1 --iters 2000 --json
# With --events, each group of xfer runs is followed by the same runs with
# XFER_RDMA_USE_EVENT_CHANNEL=true (pollers sleep on the completion channel
# soon after each completion; xfer's default busy-polls while traffic flows,
# as perftest does).
# With --always, the 8 B latency runs are also repeated with
# XFER_RDMA_POLL_IDLE=-1ns: both processes' pollers spin all the time while
# a peer is connected, as both sides of ib_write_lat do. By default the
# target's poller, which one-sided writes give nothing to poll, sleeps after
# rdma_poll_idle, and on SoftRoCE its idle vCPU is slow to wake for the rxe
# work the target does in the kernel.
# With --lat-only, each round runs only the 8 B latency pairs (no bandwidth
# runs, no regmr): more rounds of the noisiest figure in the same time.
# After the rounds: bench-out/regmr (reg_mr + dereg_mr cost per MiB).
# Raw outputs: bench-out/verbs/; the summary table: bench-out/verbs/summary.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

ROUNDS=3
DEPTHS="32"
EVENTS=0
ALWAYS=0
LATONLY=0
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --depths) DEPTHS=$2; shift 2 ;;
    --events) EVENTS=1; shift ;;
    --always) ALWAYS=1; shift ;;
    --lat-only) LATONLY=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "verbs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ "${RDMA_VM:-}" != 1 ]; then
  # Host side: build, then run the rounds inside one VM. Other VMs on this
  # host share its cores, so sample how many qemu processes run meanwhile
  # (ours included) into bench-out/verbs-host.txt.
  set -e
  go build -o xfer ./cmd/xfer
  mkdir -p bench-out
  go build -o bench-out/regmr ./tools/bench/regmr
  vm=tools/rdma-vm/rdma-vm
  [ -x "$vm" ] || vm=../shared/rdma-vm/rdma-vm
  set +e
  ( while :; do
      echo "$(date -u +%T) qemu=$(pgrep -c qemu-system || true) load=$(cut -d' ' -f1 /proc/loadavg)"
      sleep 10
    done ) >bench-out/verbs-host.txt 2>/dev/null &
  sampler=$!
  "$vm" --rxe --timeout 1500 -- tools/bench/verbs.sh "${args[@]}"
  rc=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  mkdir -p bench-out/verbs
  busy=$(awk '{split($2, q, "="); n++; if (q[2] > 1) b++} END {printf "%d of %d", b, n}' bench-out/verbs-host.txt)
  echo "host samples (every 10 s) with another qemu running besides ours: $busy" | tee -a bench-out/verbs/summary.md
  exit $rc
fi

# ---- inside the VM ----
OUT=$ROOT/bench-out/verbs
rm -rf "$OUT"
mkdir -p "$OUT"
export XFER_DEVICE=rxe0
DEV=rxe0
IP=${RDMA_VM_IP:-10.0.0.1}
PORT=18515

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -r)  nproc: $(nproc)  mode: ${RDMA_VM_MODE:-?}"
  echo "xfer: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) dirty: $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
  echo "perftest: $(dpkg-query -W -f '${Version}' perftest 2>/dev/null)"
  echo "cpu MHz: $(awk -F: '/cpu MHz/{print $2; exit}' /proc/cpuinfo)"
  echo "rounds: $ROUNDS  depths: $DEPTHS  events: $EVENTS  always: $ALWAYS  lat-only: $LATONLY"
  ibv_devinfo -d $DEV | grep -E 'hca_id|state|active_mtu|link_layer'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" >&2

# listening PORT: true once a socket listens on the port (IPv4 or IPv6).
listening() {
  local hex
  hex=$(printf ':%04X ' "$1")
  grep -q "$hex.* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# peer NAME TOOL ARGS...: perftest server in the background, wait until it
# listens, then the client against $IP. Output in $OUT/NAME{,.srv}.
peer() {
  local name=$1 tool=$2; shift 2
  local p=$PORT _
  PORT=$((PORT + 1))
  timeout 90 "$tool" "$@" -p $p >"$OUT/$name.srv" 2>&1 &
  local srv=$!
  for _ in $(seq 1 300); do listening $p && break; sleep 0.1; done
  timeout 60 "$tool" "$@" -p $p "$IP" >"$OUT/$name" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "  $name: client exit $rc" >&2; kill $srv 2>/dev/null; }
  wait $srv
  echo "$rc" >"$OUT/$name.rc"
}

# xb NAME ARGS...: xfer bench over rdma, JSON on $OUT/NAME.
xb() {
  local name=$1; shift
  timeout 120 ./xfer bench --transport rdma --json "$@" >"$OUT/$name" 2>"$OUT/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || echo "  $name: xfer exit $rc: $(tail -c 300 "$OUT/$name.err" | tr '\r' '\n' | tail -2)" >&2
  echo "$rc" >"$OUT/$name.rc"
}

t0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS ($(( $(date +%s) - t0 )) s)" >&2
  for op in write read; do
    [ "$LATONLY" = 1 ] && break
    peer "r$r-ib_${op}_bw" ib_${op}_bw -d $DEV -x 1 -s 65536 -D 2
    for d in $DEPTHS; do
      xb "r$r-xfer_${op}_64k_d$d" --op $op --size 64KiB --duration 2s --depth "$d"
    done
    if [ "$EVENTS" = 1 ]; then
      for d in $DEPTHS; do
        XFER_RDMA_USE_EVENT_CHANNEL=true xb "r$r-events-xfer_${op}_64k_d$d" --op $op --size 64KiB --duration 2s --depth "$d"
      done
    fi
  done
  peer "r$r-ib_write_lat" ib_write_lat -d $DEV -x 1 -s 8 -n 1000
  xb "r$r-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  if [ "$EVENTS" = 1 ]; then
    XFER_RDMA_USE_EVENT_CHANNEL=true xb "r$r-events-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  fi
  if [ "$ALWAYS" = 1 ]; then
    XFER_RDMA_POLL_IDLE=-1ns xb "r$r-always-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  fi
done

echo "regmr ($(( $(date +%s) - t0 )) s)" >&2
if [ "$LATONLY" = 0 ] && [ -x bench-out/regmr ]; then
  timeout 300 bench-out/regmr -dev $DEV >"$OUT/regmr" 2>"$OUT/regmr.err" || echo "  regmr failed: $(cat "$OUT/regmr.err")" >&2
fi
echo "done ($(( $(date +%s) - t0 )) s)" >&2

python3 tools/bench/verbs.py "$OUT" | tee "$OUT/summary.md"
