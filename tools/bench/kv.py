#!/usr/bin/env python3
"""The KV service against Redis, for docs/BENCHMARKS.md.

For each transport (tcp, shm), operation (GET, PUT/SET), value size (4 KiB,
1 MiB) and client count (1, 16) it runs `xfer kv bench` against a fresh
`xfer kv serve` and `redis-benchmark` against redis-server on the same
machine, in turn, ROUNDS times (xfer, redis, xfer, redis, ...), and prints
the medians and ratios as a Markdown table. Both use one key, as
redis-benchmark does without -r. Raw results go to bench-out/kv.json.

Usage: tools/bench/kv.py [--rounds N] [--xfer PATH] [--transports tcp,shm] [--scale F] [--procs N]

--procs N runs the xfer server and clients with GOMAXPROCS=N (default: Go's,
one P per CPU). Redis and redis-benchmark run one thread each; on a small
machine that both sides share, --procs 1 gives xfer the same thread budget
(docs/BENCHMARKS.md).
In the VM, over SoftRoCE (XFER_DEVICE=rxe0 picks the device):
  XFER_DEVICE=rxe0 tools/rdma-vm/rdma-vm --rxe --timeout 3000 -- \
      python3 tools/bench/kv.py --transports rdma --scale 0.1
Needs: redis-server and redis-benchmark (make bench-kv installs them).
Only loopback addresses are used.
"""
import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KV_PORT, DATA_PORT, REDIS_PORT = 19351, 19352, 19353


XFER_ENV = None  # the environment of xfer's processes (--procs)


def run(cmd, timeout=300, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True, env=env).stdout


SCALE = 1.0


def ops_for(size, conc):
    if size >= 1 << 20:
        n = 400 if conc == 1 else 800
    else:
        n = 20000 if conc == 1 else 40000
    return max(int(n * SCALE), 20)


def xfer_run(xfer, transport, op, size, conc, requests):
    out = run([xfer, "kv", "bench", "--server-addr", f"127.0.0.1:{KV_PORT}", "--transport", transport,
               "--requests", requests, "--op", op, "--value-size", str(size), "--concurrency", str(conc),
               "--keys", "1", "--ops", str(ops_for(size, conc)), "--json"], env=XFER_ENV)
    r = json.loads(out.strip().splitlines()[-1])
    assert r["transport"] == transport, r
    return {"ops_per_sec": r["ops_per_sec"], "bytes_per_sec": r["bytes_per_sec"],
            "p50_us": r["lat_p50_ns"] / 1e3, "p99_us": r["lat_p99_ns"] / 1e3}


def redis_run(op, size, conc):
    test = "get" if op == "get" else "set"
    if test == "get":
        run(["redis-benchmark", "-p", str(REDIS_PORT), "-t", "set", "-d", str(size), "-n", "10", "-c", "1"])
    out = run(["redis-benchmark", "-p", str(REDIS_PORT), "-t", test, "-d", str(size), "-c", str(conc),
               "-n", str(ops_for(size, conc)), "--csv"])
    rows = list(csv.reader(io.StringIO(out)))
    head, row = rows[0], rows[-1]
    d = dict(zip(head, row))
    rps = float(d["rps"])
    return {"ops_per_sec": rps, "bytes_per_sec": rps * size,
            "p50_us": float(d["p50_latency_ms"]) * 1e3, "p99_us": float(d["p99_latency_ms"]) * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"))
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--requests", default="data")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the operation counts (0.1 in the VM)")
    ap.add_argument("--procs", type=int, default=0, help="GOMAXPROCS of the xfer processes (default: Go's)")
    args = ap.parse_args()
    global SCALE, XFER_ENV
    SCALE = args.scale
    if args.procs > 0:
        XFER_ENV = dict(os.environ, GOMAXPROCS=str(args.procs))
    procs = os.environ.get("GOMAXPROCS", f"Go's default ({os.cpu_count()} CPUs)") if args.procs <= 0 else str(args.procs)
    print(f"xfer GOMAXPROCS: {procs}; Redis: one thread each", flush=True)
    redis = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = []
    try:
        time.sleep(0.5)
        for transport in args.transports.split(","):
            srv = subprocess.Popen([args.xfer, "kv", "serve", "--listen", f"127.0.0.1:{KV_PORT}",
                                    "--data-listen", f"127.0.0.1:{DATA_PORT}", "--memory-mb", "512",
                                    "--transport", transport], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                   env=XFER_ENV)
            try:
                srv.stdout.readline()
                for op in ("get", "put"):
                    for size in (4096, 1 << 20):
                        for conc in (1, 16):
                            xs, rs = [], []
                            for _ in range(args.rounds):
                                xs.append(xfer_run(args.xfer, transport, op, size, conc, args.requests))
                                rs.append(redis_run(op, size, conc))
                            med = lambda l, k: statistics.median(x[k] for x in l)
                            res = {"transport": transport, "op": op, "size": size, "conc": conc,
                                   "xfer_gomaxprocs": procs, "xfer": xs, "redis": rs}
                            for k in ("ops_per_sec", "bytes_per_sec", "p50_us", "p99_us"):
                                res["xfer_" + k], res["redis_" + k] = med(xs, k), med(rs, k)
                            results.append(res)
                            print(f"{transport} {op} {size} c={conc}: xfer {res['xfer_ops_per_sec']:.0f} ops/s "
                                  f"redis {res['redis_ops_per_sec']:.0f} ops/s ratio "
                                  f"{res['xfer_ops_per_sec'] / res['redis_ops_per_sec']:.2f}", flush=True)
            finally:
                srv.terminate()
                srv.wait(timeout=20)
    finally:
        redis.terminate()
        redis.wait(timeout=20)
    os.makedirs(os.path.join(ROOT, "bench-out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench-out", "kv.json"), "w") as f:
        json.dump(results, f, indent=1)
    print()
    print("| transport | op | value | clients | xfer ops/s | xfer GB/s | xfer p50/p99 µs | Redis ops/s | Redis GB/s | Redis p50/p99 µs | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        size = "4 KiB" if r["size"] == 4096 else "1 MiB"
        op = r["op"].upper() + (" (SET)" if r["op"] == "put" else "")
        print(f"| {r['transport']} | {op} | {size} | {r['conc']} | {r['xfer_ops_per_sec']:.0f} | "
              f"{r['xfer_bytes_per_sec'] / 1e9:.3f} | {r['xfer_p50_us']:.1f} / {r['xfer_p99_us']:.1f} | "
              f"{r['redis_ops_per_sec']:.0f} | {r['redis_bytes_per_sec'] / 1e9:.3f} | "
              f"{r['redis_p50_us']:.1f} / {r['redis_p99_us']:.1f} | "
              f"{r['xfer_ops_per_sec'] / r['redis_ops_per_sec']:.2f} |")


if __name__ == "__main__":
    main()
