#!/usr/bin/env python3
"""Mooncake's TransferEngine from Python against xfer bench: a 1 MiB
batch_transfer_sync_write (one entry, one call at a time) through
xfer.mooncake.engine, between a target process and an initiator process on
127.0.0.1 over tcp, against `xfer bench --transport tcp --op write --size
1MiB --depth 1` (xfer bench and the xfer serve it starts), in interleaved
rounds.

Goal: the Python call's bandwidth at 0.9x xfer bench's or more. Both sides
copy real memory: the initiator's buffer and the target's hold a pattern
written before the run, as xfer bench's do. Needs `make python` (the
library, the wheel and the venv) and the xfer binary; writes
bench-out/mooncake-engine.json.

With --one it runs one Python measurement and prints it as JSON (what each
round runs, in a process of its own)."""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results  # noqa: E402

ROOT = results.ROOT
GOAL = ">= 0.9"
SIZE = 1 << 20

# The target: an engine with a registered buffer holding a pattern; it
# prints its segment and the buffer's address, then waits for stdin to close.
TARGET = r"""
import json, sys
import numpy as np
from xfer.mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
buf = np.random.default_rng(1).integers(0, 256, int(sys.argv[1]), dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0, te.last_error
print(json.dumps({"segment": "127.0.0.1:%d" % te.get_rpc_port(), "addr": buf.ctypes.data}), flush=True)
sys.stdin.read()
te.close()
"""


def one(seconds):
    """One measurement: 1 MiB writes for seconds (after a warm-up), one
    batch_transfer_sync_write at a time. Returns bytes_per_sec and the p50
    of one call in µs."""
    import numpy as np

    from xfer.mooncake.engine import TransferEngine
    t = subprocess.Popen([sys.executable, "-c", TARGET, str(SIZE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        info = json.loads(t.stdout.readline())
        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
        src = np.random.default_rng(2).integers(0, 256, SIZE, dtype=np.uint8)
        assert te.register_memory(src.ctypes.data, src.nbytes) == 0, te.last_error
        seg, srcs, dsts, lens = info["segment"], [src.ctypes.data], [info["addr"]], [SIZE]
        for _ in range(50):
            assert te.batch_transfer_sync_write(seg, srcs, dsts, lens) == 0, te.last_error
        lat, n = [], 0
        start = time.perf_counter()
        end = start + seconds
        while True:
            t0 = time.perf_counter()
            if te.batch_transfer_sync_write(seg, srcs, dsts, lens) != 0:
                raise SystemExit(te.last_error)
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            n += 1
            if t1 >= end:
                break
        elapsed = time.perf_counter() - start
        te.close()
    finally:
        t.stdin.close()
        t.wait(timeout=30)
    lat.sort()
    return {"bytes_per_sec": n * SIZE / elapsed, "ops": n, "seconds": elapsed, "p50_us": lat[len(lat) // 2] * 1e6}


def bench_args(xfer, seconds):
    return [xfer, "bench", "--transport", "tcp", "--op", "write", "--size", "1MiB", "--depth", "1",
            "--duration", f"{seconds:g}s", "--json"]


def bench_run(xfer, seconds):
    out = subprocess.run(bench_args(xfer, seconds), capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"bytes_per_sec": r["bytes_per_sec"], "p50_us": r["lat_p50_ns"] / 1e3}


def py_args(seconds):
    return ["tools/bench/mooncake_engine.py", "--one", "--seconds", f"{seconds:g}"]


def py_run(python, seconds):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the venv's installed package, never the source tree
    out = subprocess.run([python] + py_args(seconds), cwd=ROOT, capture_output=True, text=True, check=True,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="how long each measurement writes")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"), help="the xfer binary (make build's)")
    ap.add_argument("--python", default=os.path.join(ROOT, "build/python/venv/bin/python"),
                    help="the interpreter that runs the binding: make python's venv by default")
    ap.add_argument("--out", default=results.default_path("mooncake-engine"))
    ap.add_argument("--one", action="store_true", help="run one Python measurement and print it")
    args = ap.parse_args()
    if args.one:
        sys.path = [p for p in sys.path if os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
        print(json.dumps(one(args.seconds)))
        return
    benches, pys = [], []
    for r in range(args.rounds):
        pair = [lambda: benches.append(bench_run(args.xfer, args.seconds)),
                lambda: pys.append(py_run(args.python, args.seconds))]
        for f in (pair if r % 2 == 0 else pair[::-1]):
            f()
        print(f"round {r + 1}: xfer bench {benches[-1]['bytes_per_sec'] / 1e9:.3f} GB/s "
              f"(p50 {benches[-1]['p50_us']:.0f} µs), Python {pys[-1]['bytes_per_sec'] / 1e9:.3f} GB/s "
              f"(p50 {pys[-1]['p50_us']:.0f} µs)", flush=True)
    bcmd = shlex.join([os.path.relpath(args.xfer, ROOT) if args.xfer.startswith(ROOT) else args.xfer] +
                      bench_args("", args.seconds)[1:])
    pcmd = shlex.join([os.path.relpath(args.python, ROOT) if args.python.startswith(ROOT) else args.python] +
                      py_args(args.seconds))
    t = results.target(
        "mooncake-tcp-write-1m", "python",
        "tcp batch_transfer_sync_write 1 MiB from Python (xfer.mooncake.engine), depth 1, against xfer bench",
        "B/s", results.series([p["bytes_per_sec"] for p in pys], pcmd),
        results.series([b["bytes_per_sec"] for b in benches], bcmd, "xfer bench --depth 1"), results.goal(GOAL))
    results.write(args.out, "mooncake-engine", [t], args.rounds, args.xfer)
    print(f"\n1 MiB WRITE, depth 1, medians of {args.rounds} interleaved rounds: xfer bench "
          f"{t['peer']['median'] / 1e9:.2f} GB/s, Python batch_transfer_sync_write {t['xfer']['median'] / 1e9:.2f} GB/s, "
          f"ratio {t['ratio']:.2f} (goal {GOAL})")


if __name__ == "__main__":
    main()
