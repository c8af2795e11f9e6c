#!/usr/bin/env bash
# tools/gpu/check.sh: the GPU suite, in one run, on a machine with a CUDA GPU.
#
#   tools/gpu/check.sh build   here, with Go: builds what the run needs into
#                              .gpu/bin.tgz (the xfer command and the test
#                              binaries of the packages with GPU tests)
#   tools/gpu/check.sh run     there (no Go needed): unpacks .gpu/bin.tgz,
#                              runs the suite and the benchmarks, and writes
#                              summary.txt, results.jsonl and logs.tgz (every
#                              step's log) under $OUT (default /tmp/xfer-gpu)
#
# On a host without a GPU the run stops at its first step and prints what
# xfer says: "CUDA is not available", and why.
#
# The run, in order (each step's log is NAME.log in logs.tgz; summary.txt
# says which passed; the slowest step comes last, so that a run cut short
# still has the rest):
#   1. the driver binding (internal/cuda) with XFER_REQUIRE_CUDA=1, so that
#      a test that cannot reach the GPU fails instead of skipping;
#   2. the engine's GPU tests (the GPU pool; every pair of memory kinds
#      over tcp and shm, 1 byte to 9 MiB; concurrency; registering memory
#      allocated elsewhere), the connector's (vLLM-Omni's TestGPUPool in
#      Go: host and GPU tensors put into a GPU pool and got into another,
#      4 B to 64 MiB; concurrent puts and gets), the probe's list of GPUs
#      and xfer doctor's line for each GPU (memory, DMA-BUF, BAR1);
#   3. xfer transfer --mode gpu, producer and consumer as two processes,
#      every tensor's MD5 checked: 1 MiB and 1 GiB over shm and tcp; and a
#      producer SIGKILLed mid-run, whose consumer must fail with an error
#      within its --timeout, not hang;
#   4. the same from Python (python3 with torch): the binding's GPU tests
#      (vLLM-Omni's TestGPUPool: a pool on the GPU, CPU and CUDA tensors
#      put, a get that is a CUDA tensor on the receiver's pool; zero copy;
#      ManagedBuffer views; concurrency), xfer.mooncake's (TestGPUPool in
#      test_mooncake.py), the test files given to build as VENDOR_TESTS
#      (their GPU and CUDA tests, on shm and tcp), and xfer.cross_node
#      --mode gpu as two processes over shm and tcp;
#   5. the benchmarks, ROUNDS interleaved rounds (default 3): torch's
#      device-to-device copy of 256 MiB against xfer bench WRITE and READ
#      of 256 MiB over shm between GPU pools; xfer bench WRITE and READ of
#      256 MiB over tcp between GPU pools against the same between host
#      pools. results.jsonl holds every row;
#   6. two processes (xfer bench and the xfer serve it starts), both pools
#      on the GPU, every byte verified: shm (CUDA IPC) and tcp (staging),
#      WRITE and READ of 1 byte, 1 MiB and 1 GiB.
set -uo pipefail
cd "$(dirname "$0")/../.."

case "${1:-}" in
build)
	rm -rf .gpu && mkdir -p .gpu/bin
	go build -trimpath -ldflags='-s -w' -o .gpu/bin/xfer ./cmd/xfer &&
		go test -c -trimpath -ldflags='-s -w' -o .gpu/bin/xfer.test . &&
		go test -c -trimpath -ldflags='-s -w' -o .gpu/bin/cuda.test ./internal/cuda &&
		go test -c -trimpath -ldflags='-s -w' -o .gpu/bin/connector.test ./connector &&
		go test -c -trimpath -ldflags='-s -w' -o .gpu/bin/probe.test ./probe &&
		CGO_ENABLED=1 go build -trimpath -ldflags='-s -w' -buildmode=c-shared -o .gpu/bin/libxfer.so ./cmd/libxfer || exit 1
	rm -f .gpu/bin/libxfer.h
	# Test files of other projects to run against xfer there (not part of
	# this repository): VENDOR_TESTS names a folder of them, with its
	# pytest.ini; each file imports xfer.mooncake where it imported Mooncake.
	if [ -n "${VENDOR_TESTS:-}" ]; then
		mkdir -p .gpu/vendor && cp "$VENDOR_TESTS"/*.py "$VENDOR_TESTS"/pytest.ini .gpu/vendor/ || exit 1
	fi
	tar -C .gpu -czf .gpu/bin.tgz bin && rm -rf .gpu/bin
	ls -l .gpu/bin.tgz
	exit 0
	;;
run) ;;
*)
	echo "usage: tools/gpu/check.sh build|run" >&2
	exit 2
	;;
esac

OUT=${OUT:-/tmp/xfer-gpu}
ROUNDS=${ROUNDS:-3}
# QUICK=1 leaves out the benchmarks and the slow 1 GiB verified benches
# (steps 5 and 6): a recheck of everything else in about two minutes.
QUICK=${QUICK:-}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$(mktemp -d)
trap 'tar -C "$LOG" -czf "$OUT/logs.tgz" .' EXIT
BIN=$(mktemp -d)
tar -C "$BIN" -xzf .gpu/bin.tgz || { echo "no .gpu/bin.tgz: run tools/gpu/check.sh build first" >&2; exit 2; }
BIN=$BIN/bin
SUM=$OUT/summary.txt
: >"$SUM"
pass=0 fail=0

step() { # step NAME CMD...: runs CMD with its output in $OUT/NAME.log
	local name=$1
	shift
	local t0=$SECONDS
	if "$@" >"$LOG/$name.log" 2>&1; then
		pass=$((pass + 1))
		echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$SUM"
	else
		fail=$((fail + 1))
		echo "FAIL $name ($((SECONDS - t0)) s): tail of $name.log:" | tee -a "$SUM"
		tail -20 "$LOG/$name.log" | sed 's/^/    /' | tee -a "$SUM"
	fi
}

{
	date -u
	nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv 2>&1
	uname -r
	lsmod 2>/dev/null | grep -E '^(nvidia|nvidia_peermem|ib_core)' || echo "no nvidia_peermem / ib_core module listed"
	echo "RDMA devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && echo "$d resource:" && head -4 "$d/resource"
	done
	nvidia-smi -q -d MEMORY 2>&1 | grep -A4 BAR1
} >"$LOG/machine.txt" 2>&1
cat "$LOG/machine.txt"

# A host without a GPU: say so, the way users see it.
if ! "$BIN/xfer" bench --memory cuda:0 --size 1 --iters 1 >"$LOG/probe.log" 2>&1; then
	cat "$LOG/probe.log"
	if grep -q "CUDA is not available" "$LOG/probe.log"; then
		echo "no GPU here: the suite needs one" | tee -a "$SUM"
		exit 3
	fi
	echo "FAIL probe: xfer bench --memory cuda:0 failed" | tee -a "$SUM"
	exit 1
fi

export XFER_REQUIRE_CUDA=1
step cuda "$BIN/cuda.test" -test.v -test.count=1 -test.timeout=5m
step engine "$BIN/xfer.test" -test.v -test.count=1 -test.timeout=5m -test.run 'GPU'
step connector "$BIN/connector.test" -test.v -test.count=1 -test.timeout=5m -test.run 'GPU'
step probe "$BIN/probe.test" -test.v -test.count=1 -test.run 'GPUs'
# xfer doctor: each GPU as GPU memory uses it (memory, DMA-BUF, BAR1 size).
doctor_gpu() {
	local out
	out=$("$BIN/xfer" doctor 2>&1) # it fails here for want of RDMA devices
	echo "$out"
	grep -E '^\[ OK \] cuda:[0-9]+ .*BAR1' <<<"$out"
}
step doctor-gpu doctor_gpu

# xfer transfer --mode gpu: a producer and a consumer.
transfer_pair() { # transport MiB transfers
	local common=(--mode gpu --transport "$1" --tensor-size-mb "$2" --num-transfers "$3" --timeout 60s
		--local-host 127.0.0.1 --remote-host 127.0.0.1 --ctrl-port 15602)
	"$BIN/xfer" transfer --role producer --local-port 15600 --remote-port 15601 "${common[@]}" &
	local producer=$! rc=0
	"$BIN/xfer" transfer --role consumer --local-port 15601 --remote-port 15600 "${common[@]}" || rc=$?
	wait "$producer" || rc=$?
	return "$rc"
}
# A producer killed mid-run: the consumer must fail, saying why, in time.
killed_producer() { # transport
	local common=(--mode gpu --transport "$1" --tensor-size-mb 256 --num-transfers 10000 --timeout 10s
		--local-host 127.0.0.1 --remote-host 127.0.0.1 --ctrl-port 15702)
	"$BIN/xfer" transfer --role producer --local-port 15700 --remote-port 15701 "${common[@]}" >/dev/null 2>&1 &
	local producer=$!
	timeout 60 "$BIN/xfer" transfer --role consumer --local-port 15701 --remote-port 15700 "${common[@]}" >"$LOG/killed-$1.out" 2>&1 &
	local consumer=$!
	sleep 4
	kill -9 "$producer"
	local rc=0
	wait "$consumer" || rc=$?
	cat "$LOG/killed-$1.out"
	echo "consumer exit $rc"
	# It must fail (not 0), by itself (not timeout's 124), without a panic.
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q -e panic -e 'goroutine ' "$LOG/killed-$1.out"
}
for tr in shm tcp; do
	step "transfer-$tr-1m" transfer_pair "$tr" 1 20
	step "transfer-$tr-1g" transfer_pair "$tr" 1024 3
	step "killed-producer-$tr" killed_producer "$tr"
done

# Python: the binding's library, built here, goes where the package loads it.
cp "$BIN/libxfer.so" python/xfer/libxfer.so
step python env -C python XFER_REQUIRE_CUDA=1 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_xfer_connector.py tests/test_mooncake.py -k 'GPU or gpu'
# Other projects' GPU test classes through xfer.mooncake (build's VENDOR_TESTS).
if [ -d .gpu/vendor ]; then
	for tr in shm tcp; do
		step "vendor-gpu-$tr" env -C .gpu/vendor XFER_TRANSPORT=$tr PYTHONPATH="$PWD/python" "$PY" -m pytest -q -rs -s -k 'GPU or cuda' .
	done
fi
cross_node_pair() { # transport
	local common=(--mode gpu --transport "$1" --tensor-size-mb 64 --num-transfers 3 --timeout 60
		--local-host 127.0.0.1 --remote-host 127.0.0.1 --ctrl-port 15802)
	PYTHONPATH=python "$PY" -m xfer.cross_node --role producer --local-port 15800 --remote-port 15801 "${common[@]}" &
	local producer=$! rc=0
	PYTHONPATH=python "$PY" -m xfer.cross_node --role consumer --local-port 15801 --remote-port 15800 "${common[@]}" || rc=$?
	wait "$producer" || rc=$?
	return "$rc"
}
for tr in shm tcp; do
	step "python-cross-node-$tr" cross_node_pair "$tr"
done

# Benchmarks: interleaved rounds, one JSON row each.
R=$OUT/results.jsonl
: >"$R"
row() { # row LABEL CMD...: the command's JSON lines, labelled and numbered
	local label=$1
	shift
	"$@" 2>>"$LOG/bench.log" | grep '^{' | sed "s/^{/{\"label\":\"$label\",\"round\":$round,/" >>"$R"
}
[ -n "$QUICK" ] && ROUNDS=0
for round in $(seq 1 "$ROUNDS"); do
	row torch-d2d "$PY" tools/gpu/d2d.py --size-mb 256 --iters 50
	row shm-gpu-write "$BIN/xfer" bench --json --memory cuda:0 --transport shm --op write --size 256MiB --depth 1 --duration 2s --memory-mb 600
	row shm-gpu-read "$BIN/xfer" bench --json --memory cuda:0 --transport shm --op read --size 256MiB --depth 1 --duration 2s --memory-mb 600
	row tcp-gpu-write "$BIN/xfer" bench --json --memory cuda:0 --transport tcp --op write --size 256MiB --depth 2 --duration 3s --memory-mb 600
	row tcp-host-write "$BIN/xfer" bench --json --transport tcp --op write --size 256MiB --depth 2 --duration 3s --memory-mb 600
	row tcp-gpu-read "$BIN/xfer" bench --json --memory cuda:0 --transport tcp --op read --size 256MiB --depth 2 --duration 3s --memory-mb 600
	row tcp-host-read "$BIN/xfer" bench --json --transport tcp --op read --size 256MiB --depth 2 --duration 3s --memory-mb 600
done
# The slowest last: every byte of 1 GiB verified through host copies.
for tr in shm tcp; do
	[ -n "$QUICK" ] && break
	for op in write read; do
		step "twoproc-$tr-$op" "$BIN/xfer" bench --memory cuda:0 --transport "$tr" --op "$op" --verify \
			--size 1,1MiB,1GiB --iters 2 --depth 1 --memory-mb 2100
	done
done
"$PY" - "$R" <<'PY' | tee -a "$SUM"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for label in sorted({r["label"] for r in rows}):
    v = [r["bytes_per_sec"] for r in rows if r["label"] == label]
    med[label] = statistics.median(v)
    print(f"{label:16s} median {med[label]/1e9:8.2f} GB/s over {len(v)} rounds: " + ", ".join(f"{x/1e9:.2f}" for x in v))
def ratio(a, b, goal):
    if a in med and b in med:
        r = med[a] / med[b]
        print(f"{a} / {b} = {r:.2f} (goal {goal}: {'met' if r >= goal else 'NOT met'})")
ratio("shm-gpu-write", "torch-d2d", 0.8)
ratio("shm-gpu-read", "torch-d2d", 0.8)
ratio("tcp-gpu-write", "tcp-host-write", 0.8)
ratio("tcp-gpu-read", "tcp-host-read", 0.8)
PY
echo "$pass passed, $fail failed" | tee -a "$SUM"
[ "$fail" -eq 0 ]
