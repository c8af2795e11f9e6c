#!/usr/bin/env bash
# metrics_cost.sh [ROUNDS] [BENCHTIME]: what the engine's Prometheus metrics
# cost, as BenchmarkWriteMetrics measures it (a synchronous 64-byte WRITE
# between two engines in one process, both with metrics or both without),
# over tcp and shm. It builds the root package's test binary once, then
# runs ROUNDS rounds (default 10) of BENCHTIME each (default 1s) that
# alternate which of off and on goes first, and prints the median ns/op
# of each, their ratio (on / off), the median of each round's own on/off
# ratio (the two ran back to back, so it cancels most of the machine's
# drift) and the allocations per operation.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-10}
benchtime=${2:-1s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/xfer.test" . >/dev/null
for i in $(seq 1 "$rounds"); do
  if (( i % 2 )); then order=(off on); else order=(on off); fi
  for tr in tcp shm; do
    for m in "${order[@]}"; do
      "$tmp/xfer.test" -test.run '^$' -test.bench "^BenchmarkWriteMetrics$/^$tr$/^metrics=$m$" \
        -test.benchmem -test.benchtime "$benchtime" | grep '^BenchmarkWriteMetrics' >>"$tmp/out"
    done
  done
done
python3 - "$tmp/out" "$rounds" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'BenchmarkWriteMetrics/(\w+)/metrics=(\w+)-\d+\s+\d+\s+([\d.]+) ns/op.*?(\d+) B/op\s+(\d+) allocs/op', line)
    if m:
        rows.setdefault((m[1], m[2]), []).append((float(m[3]), int(m[5])))
print(f"rounds: {sys.argv[2]}")
for tr in ("tcp", "shm"):
    off = statistics.median(v for v, _ in rows[(tr, "off")])
    on = statistics.median(v for v, _ in rows[(tr, "on")])
    allocs = max(a for k in ("off", "on") for _, a in rows[(tr, k)])
    paired = statistics.median(a[0] / b[0] for a, b in zip(rows[(tr, "on")], rows[(tr, "off")]))
    print(f"{tr}: off {off:.0f} ns/op, on {on:.0f} ns/op, on/off {on/off:.3f}, median of the rounds' on/off {paired:.3f}, max allocs/op {allocs}")
    print(f"  off rounds: {' '.join(f'{v:.0f}' for v, _ in rows[(tr, 'off')])}")
    print(f"  on rounds:  {' '.join(f'{v:.0f}' for v, _ in rows[(tr, 'on')])}")
PY
