#!/usr/bin/env bash
# connector_ab.sh: an A/B of the connector's 4 KiB put+get
# (BenchmarkPutGet4K) between two test binaries of package connector, with
# one 4 KiB READ of `xfer bench` as the peer, in the same rounds.
#
# Usage: tools/bench/connector_ab.sh TEST_A TEST_B XFER [ROUNDS] [ITERS]
#
# TEST_A and TEST_B are `go test -c ./connector` binaries of the two
# revisions, XFER an xfer binary. Each round runs, per transport (tcp, shm),
# `XFER bench --transport T --op read --size 4KiB --depth 1 --iters ITERS
# --json`, then both binaries with `-test.bench '^BenchmarkPutGet4K$/^T$'
# -test.benchtime ITERSx`, A first in odd rounds and B first in even ones.
# Defaults: 5 rounds of 2000. It prints one line per run ("round transport
# read|A|B p50 p99", in µs) and then the medians over the rounds.
# TRANSPORTS="rdma" (inside tools/rdma-vm, with XFER_DEVICE and
# XFER_TEST_DEVICE set) runs the rounds over rdma instead of tcp and shm.
set -euo pipefail
[ $# -ge 3 ] || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2") XFER=$(realpath "$3") ROUNDS=${4:-5} ITERS=${5:-2000}
cd "$(dirname "$0")/../../connector"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
putget() { # name binary transport round
  "$2" -test.run '^$' -test.bench "^BenchmarkPutGet4K\$/^$3\$" -test.benchtime "${ITERS}x" |
    awk -v r="$4" -v t="$3" -v n="$1" '/^BenchmarkPutGet4K\// { for (i = 1; i <= NF; i++) { if ($i == "p50-µs") p50 = $(i-1); if ($i == "p99-µs") p99 = $(i-1) }; print r, t, n, p50, p99 }'
}
for r in $(seq 1 "$ROUNDS"); do
  for t in ${TRANSPORTS:-tcp shm}; do
    "$XFER" bench --transport "$t" --op read --size 4KiB --depth 1 --iters "$ITERS" --json |
      python3 -c "import json, sys; d = [json.loads(l) for l in sys.stdin if l.startswith('{')][0]; print($r, '$t', 'read', d['lat_p50_ns'] / 1e3, d['lat_p99_ns'] / 1e3)"
    if [ $((r % 2)) = 1 ]; then putget A "$A" "$t" "$r"; putget B "$B" "$t" "$r"; else putget B "$B" "$t" "$r"; putget A "$A" "$t" "$r"; fi
  done
done | tee "$out"
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, t, n, p50, p99 = line.split()
    runs[t, n].append((float(p50), float(p99)))
print("\n| transport | run | p50 µs (median) | p99 µs (median) | rounds' p50 |")
print("| --- | --- | --- | --- | --- |")
for (t, n), v in sorted(runs.items()):
    print(f"| {t} | {n} | {statistics.median(x[0] for x in v):.1f} | {statistics.median(x[1] for x in v):.1f} | "
          + ", ".join(f"{x[0]:.1f}" for x in v) + " |")
PY
