#!/usr/bin/env bash
# xfer's rdma transport against perftest, on the same soft-RDMA device (rxe0,
# or siw0 with --device siw0) in the same rdma-vm run, as interleaved rounds
# (peer, xfer, peer, xfer, ...). The results go to docs/BENCHMARKS.md
# ("rdma on SoftRoCE and SoftiWARP") through tools/bench/report.py.
#
# Usage (on the host; it builds xfer and regmr, then re-runs itself in the VM):
#   tools/bench/verbs.sh [--rounds N] [--depths "32 16 64"] [--events] [--always] [--lat-only]
#                        [--device rxe0|siw0] [--xfer PATH] [--xfer-b PATH]
#                        [--regmr PATH] [--regmr-b PATH] [--no-regmr] [--out FILE]
# or directly (build ./xfer and bench-out/regmr first):
#   tools/rdma-vm/rdma-vm --rxe --timeout 1500 -- tools/bench/verbs.sh [options]
# Defaults: 3 rounds, depth 32, rxe0, no event-channel runs, ./xfer (built
# here when --xfer is not given), results in bench-out/verbs.json.
#
# Each round runs, in this order (server and client of perftest both in the
# VM, the client to $RDMA_VM_IP = 10.0.0.1, the VM's own dummy0 address;
# XFER_DEVICE=DEV so that xfer never picks the other device; on siw0
# perftest connects through rdma_cm, -R, as iWARP requires, without -x 1):
#   ib_write_bw -d DEV [-x 1] -s 65536 -D 2        (-x 1 on rxe0: RoCE v2)
#   xfer bench --transport rdma --op write --size 64KiB --duration 2s --depth D --json   (each D)
#   ib_read_bw  -d DEV [-x 1] -s 65536 -D 2
#   xfer bench --transport rdma --op read  --size 64KiB --duration 2s --depth D --json   (each D)
#   ib_write_lat -d DEV [-x 1] -s 8 -n 1000
#   ib_read_lat -d DEV -s 8 -n 1000                (siw0 only: see below)
#   xfer bench --transport rdma --op read --size 8 --depth 1 --iters 2000 --json   (siw0 only)
#   xfer bench --transport rdma --op write --size 8 --depth 1 --iters 2000 --json
# On siw0 an xfer WRITE ends with a 1-byte READ (iWARP completes a WRITE once
# its data has left, not once it is placed), so the 8 B round trip is also
# shown against ib_read_lat's, the floor of a READ's round trip, and xfer's
# own 8 B READ against ib_read_lat (no goals).
# With --xfer-b, every xfer run is made with both binaries, one right after
# the other, A first in odd rounds and B first in even ones (an A/B in one
# VM run, tools/bench/ab.sh); the second binary's outputs go to
# bench-out/verbs/b/.
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
# After the rounds: regmr (reg_mr + dereg_mr cost per MiB; both builds' with
# --regmr-b; none with --no-regmr).
# Raw outputs: bench-out/verbs/; the summary table: bench-out/verbs/summary.md;
# the results file (tools/bench/results.py): bench-out/verbs.json or --out.
set -uo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
ROOT=$PWD

ROUNDS=3
DEPTHS="32"
EVENTS=0
ALWAYS=0
LATONLY=0
DEV=rxe0
XFER=
XFER_B=
REGMR=
REGMR_B=
RESULTS=$ROOT/bench-out/verbs.json
args=("$@")
# abspath P: P made absolute (the VM runs in the same directory, but the
# paths are passed on as given).
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
need() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "verbs.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) need "$@"; ROUNDS=$2; shift 2 ;;
    --depths) need "$@"; DEPTHS=$2; shift 2 ;;
    --events) EVENTS=1; shift ;;
    --always) ALWAYS=1; shift ;;
    --lat-only) LATONLY=1; shift ;;
    --device) need "$@"; DEV=$2; shift 2 ;;
    --xfer) need "$@"; XFER=$(abspath "$2"); shift 2 ;;
    --xfer-b) need "$@"; XFER_B=$(abspath "$2"); shift 2 ;;
    --regmr) need "$@"; REGMR=$(abspath "$2"); shift 2 ;;
    --regmr-b) need "$@"; REGMR_B=$(abspath "$2"); shift 2 ;;
    --no-regmr) REGMR=none; shift ;;
    --out) need "$@"; RESULTS=$(abspath "$2"); shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$SELF"; exit 0 ;;
    *) echo "verbs.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "verbs.sh: --rounds must be a positive integer, not '$ROUNDS'" >&2; exit 2 ;; esac
case "$DEV" in
  rxe0) VMDEV=--rxe; CM=(-x 1) ;;  # GID 1: RoCE v2, IPv4-mapped
  # iWARP connects through rdma_cm only, and siw has GID 0 alone: with
  # -x 1 ib_write_lat cannot connect ("Unable to set up socket connection").
  siw0) VMDEV=--siw; CM=(-R) ;;
  *) echo "verbs.sh: --device must be rxe0 or siw0, not '$DEV'" >&2; exit 2 ;;
esac

if [ "${RDMA_VM:-}" != 1 ]; then
  # Host side: build, then run the rounds inside one VM. Other VMs on this
  # host share its cores, so sample how many qemu processes run meanwhile
  # (ours included) into bench-out/verbs-host.txt.
  set -e
  mkdir -p bench-out
  # Build what was not given: xfer and regmr of this tree.
  pass=()
  if [ -z "$XFER" ]; then
    go build -o xfer ./cmd/xfer
    pass+=(--xfer "$ROOT/xfer")
  fi
  if [ "$REGMR" = none ]; then
    :
  elif [ -z "$REGMR" ]; then
    go build -o bench-out/regmr ./tools/bench/regmr
    pass+=(--regmr "$ROOT/bench-out/regmr")
  fi
  [ "$REGMR" != none ] || REGMR=
  for b in "$XFER" "$XFER_B" "$REGMR" "$REGMR_B"; do
    [ -z "$b" ] || [ -x "$b" ] || { echo "verbs.sh: $b is not an executable file" >&2; exit 2; }
  done
  vm=tools/rdma-vm/rdma-vm
  # The results file names the command as it was given on the host, and the
  # host the VM ran on.
  export BENCH_COMMAND="tools/bench/verbs.sh${args[*]:+ ${args[*]}}"
  export BENCH_HOST="nproc=$(nproc) kernel=$(uname -r)"
  set +e
  ( while :; do
      echo "$(date -u +%T) qemu=$(pgrep -c qemu-system || true) load=$(cut -d' ' -f1 /proc/loadavg)"
      sleep 10
    done ) >bench-out/verbs-host.txt 2>/dev/null &
  sampler=$!
  "$vm" "$VMDEV" --timeout 1500 -- tools/bench/verbs.sh "${args[@]}" "${pass[@]}"
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
[ -z "$XFER_B" ] || mkdir -p "$OUT/b"
export XFER_DEVICE=$DEV
: "${XFER:=$ROOT/xfer}"
: "${REGMR:=$ROOT/bench-out/regmr}"
[ -x "$XFER" ] || { echo "verbs.sh: no xfer binary at $XFER (build it on the host, or give --xfer)" >&2; exit 2; }
IP=${RDMA_VM_IP:-10.0.0.1}
PORT=18515

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -r)  nproc: $(nproc)  mode: ${RDMA_VM_MODE:-?}"
  echo "scripts: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) dirty: $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
  echo "perftest: $(dpkg-query -W -f '${Version}' perftest 2>/dev/null)"
  echo "cpu MHz: $(awk -F: '/cpu MHz/{print $2; exit}' /proc/cpuinfo)"
  echo "rounds: $ROUNDS  depths: $DEPTHS  events: $EVENTS  always: $ALWAYS  lat-only: $LATONLY  device: $DEV"
  echo "xfer: $XFER${XFER_B:+  xfer-b: $XFER_B}"
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
  timeout 90 "$tool" "$@" "${CM[@]}" -p $p >"$OUT/$name.srv" 2>&1 &
  local srv=$!
  for _ in $(seq 1 300); do listening $p && break; sleep 0.1; done
  timeout 60 "$tool" "$@" "${CM[@]}" -p $p "$IP" >"$OUT/$name" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "  $name: client exit $rc" >&2; kill $srv 2>/dev/null; }
  wait $srv
  echo "$rc" >"$OUT/$name.rc"
}

# xb1 BINARY DIR NAME ARGS...: xfer bench over rdma, JSON on DIR/NAME.
xb1() {
  local bin=$1 dir=$2 name=$3; shift 3
  timeout 120 "$bin" bench --transport rdma --json "$@" >"$dir/$name" 2>"$dir/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || echo "  $name: $bin exit $rc: $(tail -c 300 "$dir/$name.err" | tr '\r' '\n' | tail -2)" >&2
  echo "$rc" >"$dir/$name.rc"
}

# xb NAME ARGS...: xb1 with the xfer binary, and with --xfer-b's right
# before or after it (A first in odd rounds, B first in even ones; $r is
# the round).
xb() {
  if [ -z "$XFER_B" ]; then
    xb1 "$XFER" "$OUT" "$@"
  elif [ $((r % 2)) -eq 1 ]; then
    xb1 "$XFER" "$OUT" "$@"; xb1 "$XFER_B" "$OUT/b" "$@"
  else
    xb1 "$XFER_B" "$OUT/b" "$@"; xb1 "$XFER" "$OUT" "$@"
  fi
}

t0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS ($(( $(date +%s) - t0 )) s)" >&2
  for op in write read; do
    [ "$LATONLY" = 1 ] && break
    peer "r$r-ib_${op}_bw" ib_${op}_bw -d $DEV -s 65536 -D 2
    for d in $DEPTHS; do
      xb "r$r-xfer_${op}_64k_d$d" --op $op --size 64KiB --duration 2s --depth "$d"
    done
    if [ "$EVENTS" = 1 ]; then
      for d in $DEPTHS; do
        XFER_RDMA_USE_EVENT_CHANNEL=true xb "r$r-events-xfer_${op}_64k_d$d" --op $op --size 64KiB --duration 2s --depth "$d"
      done
    fi
  done
  peer "r$r-ib_write_lat" ib_write_lat -d $DEV -s 8 -n 1000
  # iWARP: xfer ends each WRITE with a 1-byte READ (a WRITE completes once
  # its data has left), so its round trip is a READ's: perftest's 8 B READ
  # is the floor to compare it with.
  # xfer's own 8 B READ beside it splits xfer's round trip into what the
  # READ costs xfer and what the WRITE in front of it adds.
  case "$DEV" in siw*)
    peer "r$r-ib_read_lat" ib_read_lat -d $DEV -s 8 -n 1000
    xb "r$r-xfer_read_8_d1" --op read --size 8 --depth 1 --iters 2000 ;;
  esac
  xb "r$r-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  if [ "$EVENTS" = 1 ]; then
    XFER_RDMA_USE_EVENT_CHANNEL=true xb "r$r-events-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  fi
  if [ "$ALWAYS" = 1 ]; then
    XFER_RDMA_POLL_IDLE=-1ns xb "r$r-always-xfer_write_8_d1" --op write --size 8 --depth 1 --iters 2000
  fi
done

echo "regmr ($(( $(date +%s) - t0 )) s)" >&2
if [ "$LATONLY" = 0 ] && [ "$REGMR" != none ] && [ -x "$REGMR" ]; then
  timeout 300 "$REGMR" -dev $DEV >"$OUT/regmr" 2>"$OUT/regmr.err" || echo "  regmr failed: $(cat "$OUT/regmr.err")" >&2
  if [ -n "$REGMR_B" ]; then
    timeout 300 "$REGMR_B" -dev $DEV >"$OUT/b/regmr" 2>"$OUT/b/regmr.err" || echo "  regmr (B) failed: $(cat "$OUT/b/regmr.err")" >&2
  fi
fi
echo "done ($(( $(date +%s) - t0 )) s)" >&2

python3 tools/bench/verbs.py "$OUT" --device "$DEV" --out "$RESULTS" \
  --command "${BENCH_COMMAND:-tools/bench/verbs.sh${args[*]:+ ${args[*]}}}" \
  --xfer "$XFER" ${XFER_B:+--xfer-b "$XFER_B"} | tee "$OUT/summary.md"
exit "${PIPESTATUS[0]}"
