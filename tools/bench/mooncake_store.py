#!/usr/bin/env python3
"""Mooncake's store from Python against xfer kv bench: put and get of 4 KiB
and 1 MiB through xfer.mooncake.store.MooncakeDistributedStore, one call at
a time, against `xfer kv bench --concurrency 1 --keys 1` (one client, one
key) and the `xfer kv serve` it talks to, in interleaved rounds, on tcp and
shm.

The store's side: `xfer mooncake master` on 127.0.0.1, a holder process
whose client contributes the segment, and the measuring process, whose
client puts into the holder's segment (ReplicateConfig.preferred_segment)
and reads back from it: the bytes cross processes, as kv bench's do. A put
is an upsert of one key (kv bench's PUT overwrites its key; a store put of
an existing key would move nothing); a get returns bytes.

Goal: each Python figure at 0.8x kv bench's operations per second or more.
Needs `make python` (the library, the wheel and the venv) and the xfer
binary; writes bench-out/mooncake-store.json.

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
GOAL = ">= 0.8"
HOST = "127.0.0.1"
SIZES = {"4k": 4096, "1m": 1 << 20}

# The holder: a store client whose segment holds the measured objects; it
# prints its segment name, then waits for stdin to close.
HOLDER = r"""
import sys
from xfer.mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 256 << 20, 16 << 20, sys.argv[2], "", sys.argv[1])
assert rc == 0, (rc, s.last_error)
print(s.get_hostname(), flush=True)
sys.stdin.read()
s.close()
"""


def start_master(xfer):
    p = subprocess.Popen([xfer, "mooncake", "master", "--rpc_address", HOST, "--port", "0", "--metrics_port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if "listening on " not in line:
        sys.exit(f"mooncake_store.py: {xfer} mooncake master did not start: {line!r}")
    return p, line.split("listening on ", 1)[1].split()[0]


def one(master, transport, op, size, seconds):
    """One measurement: op of size bytes for seconds (after a warm-up), one
    call at a time. Returns ops_per_sec and the p50 of one call in µs."""
    from xfer.mooncake.store import MooncakeDistributedStore, ReplicateConfig
    h = subprocess.Popen([sys.executable, "-c", HOLDER, master, transport], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        seg = h.stdout.readline().strip()
        s = MooncakeDistributedStore()
        rc = s.setup(HOST, "P2PHANDSHAKE", 16 << 20, 64 << 20, transport, "", master)
        assert rc == 0, (rc, s.last_error)
        cfg = ReplicateConfig()
        cfg.preferred_segment = seg
        value = os.urandom(size)
        key = "bench-%d" % os.getpid()
        assert s.upsert(key, value, cfg) == 0, s.last_error
        if op == "put":
            def call():
                if s.upsert(key, value, cfg) != 0:
                    raise SystemExit(s.last_error)
        else:
            def call():
                if len(s.get(key)) != size:
                    raise SystemExit(s.last_error)
        for _ in range(200 if size < 1 << 20 else 50):
            call()
        lat = []
        start = time.perf_counter()
        end = start + seconds
        while True:
            t0 = time.perf_counter()
            call()
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            if t1 >= end:
                break
        elapsed = time.perf_counter() - start
        s.remove(key, force=True)
        s.close()
    finally:
        h.stdin.close()
        h.wait(timeout=30)
    lat.sort()
    n = len(lat)
    return {"ops_per_sec": n / elapsed, "ops": n, "seconds": elapsed, "p50_us": lat[n // 2] * 1e6}


def kv_args(port, transport, op, size, seconds):
    ops = max(int(seconds * (20000 if size < 1 << 20 else 2000)), 200)
    return ["kv", "bench", "--server-addr", f"{HOST}:{port}", "--transport", transport, "--op", op,
            "--value-size", str(size), "--concurrency", "1", "--keys", "1", "--ops", str(ops), "--json"]


def kv_run(xfer, port, transport, op, size, seconds):
    out = subprocess.run([xfer] + kv_args(port, transport, op, size, seconds), capture_output=True, text=True,
                         check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if r.get("transport") != transport:
        sys.exit(f"mooncake_store.py: kv bench ran over {r.get('transport')!r}, not {transport}")
    return {"ops_per_sec": r["ops_per_sec"], "p50_us": r["lat_p50_ns"] / 1e3}


def py_args(master, transport, op, size, seconds):
    return ["tools/bench/mooncake_store.py", "--one", "--master", master, "--transport", transport, "--op", op,
            "--size", str(size), "--seconds", f"{seconds:g}"]


def py_run(python, master, transport, op, size, seconds):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the venv's installed package, never the source tree
    out = subprocess.run([python] + py_args(master, transport, op, size, seconds), cwd=ROOT, capture_output=True,
                         text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def serve_kv(xfer, transport, port):
    srv = subprocess.Popen([xfer, "kv", "serve", "--listen", f"{HOST}:{port}", "--data-listen", f"{HOST}:{port + 1}",
                            "--memory-mb", "256", "--transport", transport], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    if not srv.stdout.readline():
        sys.exit(f"mooncake_store.py: {xfer} kv serve exited before it listened")
    return srv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="how long each measurement runs")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"), help="the xfer binary (make build's)")
    ap.add_argument("--python", default=os.path.join(ROOT, "build/python/venv/bin/python"),
                    help="the interpreter that runs the binding: make python's venv by default")
    ap.add_argument("--out", default=results.default_path("mooncake-store"))
    ap.add_argument("--one", action="store_true", help="run one Python measurement and print it")
    ap.add_argument("--master")
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--op", default="get")
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    if args.one:
        sys.path = [p for p in sys.path if os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
        print(json.dumps(one(args.master, args.transport, args.op, args.size, args.seconds)))
        return
    targets = []
    master, maddr = start_master(args.xfer)
    try:
        for ti, transport in enumerate(args.transports.split(",")):
            port = 52600 + 10 * ti
            srv = serve_kv(args.xfer, transport, port)
            try:
                for op in ("put", "get"):
                    for sname, size in SIZES.items():
                        kvs, pys = [], []
                        for r in range(args.rounds):
                            pair = [lambda: kvs.append(kv_run(args.xfer, port, transport, op, size, args.seconds)),
                                    lambda: pys.append(py_run(args.python, maddr, transport, op, size, args.seconds))]
                            for f in (pair if r % 2 == 0 else pair[::-1]):
                                f()
                            print(f"{transport} {op} {sname} round {r + 1}: kv bench {kvs[-1]['ops_per_sec']:.0f} ops/s "
                                  f"(p50 {kvs[-1]['p50_us']:.0f} µs), Python {pys[-1]['ops_per_sec']:.0f} ops/s "
                                  f"(p50 {pys[-1]['p50_us']:.0f} µs)", flush=True)
                        kcmd = shlex.join([os.path.relpath(args.xfer, ROOT) if args.xfer.startswith(ROOT) else args.xfer] +
                                          kv_args(port, transport, op, size, args.seconds))
                        pcmd = shlex.join([os.path.relpath(args.python, ROOT) if args.python.startswith(ROOT)
                                           else args.python] + py_args("MASTER", transport, op, size, args.seconds))
                        call = "upsert" if op == "put" else "get"
                        t = results.target(
                            f"mooncake-store-{transport}-{op}-{sname}", "python",
                            f"{transport} store {call} {sname.upper().replace('K', ' KiB').replace('M', ' MiB')} "
                            f"from Python (xfer.mooncake.store), one at a time, against xfer kv bench -c 1",
                            "ops/s", results.series([p["ops_per_sec"] for p in pys], pcmd),
                            results.series([k["ops_per_sec"] for k in kvs], kcmd, "xfer kv bench -c 1"),
                            results.goal(GOAL))
                        targets.append(t)
                        print(f"  {t['id']}: medians kv bench {t['peer']['median']:.0f} ops/s, Python "
                              f"{t['xfer']['median']:.0f} ops/s, ratio {t['ratio']:.2f} (goal {GOAL})", flush=True)
            finally:
                srv.terminate()
                srv.wait(timeout=30)
    finally:
        master.terminate()
        master.wait(timeout=30)
    results.write(args.out, "mooncake-store", targets, args.rounds, args.xfer)


if __name__ == "__main__":
    main()
