#!/usr/bin/env python3
"""The KV spread over servers: `xfer kv bench --directory` against three servers and against one (docs/BENCHMARKS.md, "KV across servers").

One etcd (Debian's etcd-server, started by this script on 127.0.0.1) holds two
directories: PREFIX three, where three `xfer kv serve --directory ... --node-id
kv-N` register, and PREFIX one, where a fourth, alone, registers. All four
servers run for the whole run. Each round runs, in this order (reversed in
even rounds):
  xfer kv bench --directory etcd://127.0.0.1:P/three --transport T --op OP --value-size S --concurrency C --keys K --ops N --json
  xfer kv bench --directory etcd://127.0.0.1:P/one   (the same)
The client is a kv.Cluster in both: it places each key on a server by
consistent hashing; with one server every key goes to it.
Targets kvspread-T-OP-SIZE-cC: ops/s against three servers over ops/s against
one, medians of the rounds; no goal (the ratio and its limits are recorded).
The results file (tools/bench/results.py) goes to bench-out/kvspread.json, or --out.

Usage: tools/bench/kvspread.py [--rounds N] [--transports tcp] [--cases get:4KiB:16,get:1MiB:4] [--scale F] [--xfer PATH] [--out FILE]
"""
import argparse
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BANNER = "xfer kv serve: listening on "


def fail(msg):
    sys.exit(f"kvspread.py: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(tmp):
    exe = shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(exe):
        fail("no etcd: apt-get install etcd-server (tools/bench/kvspread.sh installs it)")
    client, peer = free_port(), free_port()
    cmd = [exe, "--name", "bench", "--data-dir", os.path.join(tmp, "etcd"),
           "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
           "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-cluster", f"bench=http://127.0.0.1:{peer}", "--log-level", "error"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "etcd.log"), "w"))
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", client), timeout=0.2):
                return p, f"127.0.0.1:{client}"
        except OSError:
            time.sleep(0.1)
    p.kill()
    fail("etcd did not start: see its log")


def kv_serve(xfer, transport, directory, node, memory_mb):
    cmd = [xfer, "kv", "serve", "--listen", "127.0.0.1:0", "--transport", transport, "--memory-mb", str(memory_mb),
           "--directory", directory, "--node-id", node]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith(BANNER):
        p.kill()
        fail(f"{shlex.join(cmd)}: printed {line!r}: {p.stderr.read()[-500:]}")
    return p


def run_json(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{shlex.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transports", default="tcp")
    ap.add_argument("--cases", default="get:4KiB:16,get:1MiB:4", help="OP:SIZE:CLIENTS, comma-separated")
    ap.add_argument("--scale", type=float, default=1.0, help="scales the operation counts")
    ap.add_argument("--memory-mb", type=int, default=256, help="each server's value pool")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"))
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.out is None:
        args.out = results.default_path("kvspread")
    cases = []
    for c in args.cases.split(","):
        op, size, conc = c.split(":")
        ops = 40000 if size.endswith("KiB") else 800
        cases.append((op, size, int(conc), max(int(ops * args.scale), 20)))
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        etcd, ep = start_etcd(tmp)
        procs = []
        try:
            for t in args.transports.split(","):
                three, one = f"etcd://{ep}/three-{t}", f"etcd://{ep}/one-{t}"
                for i in range(3):
                    procs.append(kv_serve(args.xfer, t, three, f"kv-{i + 1}", args.memory_mb))
                procs.append(kv_serve(args.xfer, t, one, "kv-1", args.memory_mb))
                for op, size, conc, ops in cases:
                    def bench(d):
                        return ["kv", "bench", "--directory", d, "--transport", t, "--op", op, "--value-size", size,
                                "--concurrency", str(conc), "--keys", "1000", "--ops", str(ops), "--json"]
                    m = {"three": [], "one": []}
                    lat = {"three": [], "one": []}  # each run's p50, p99, p99.9 in µs
                    for r in range(args.rounds):
                        order = ["three", "one"] if r % 2 == 0 else ["one", "three"]
                        for which in order:
                            j = run_json([args.xfer] + bench(three if which == "three" else one))
                            m[which].append(j["ops_per_sec"])
                            lat[which].append({"p50_us": j["lat_p50_ns"] / 1e3, "p99_us": j["lat_p99_ns"] / 1e3,
                                               "p999_us": j["lat_p999_ns"] / 1e3 if "lat_p999_ns" in j else None})
                        print(f"{t} {op} {size} c{conc} round {r + 1}: three servers {m['three'][-1]:.0f} ops/s, "
                              f"one {m['one'][-1]:.0f} ops/s", flush=True)
                    tid = f"kvspread-{t}-{op}-{size.lower().replace('ib', '')}-c{conc}"
                    c3 = "xfer " + shlex.join(bench(three)).replace(ep, "127.0.0.1:P")
                    c1 = "xfer " + shlex.join(bench(one)).replace(ep, "127.0.0.1:P")
                    targets.append(results.target(tid, "kvspread", f"{t} {op.upper()} {size}, {conc} clients, three servers against one",
                                                  "ops/s", results.series(m["three"], c3, latency=results.latency(lat["three"])),
                                                  results.series(m["one"], c1, "the same against one server",
                                                                 latency=results.latency(lat["one"]))))
                    a, b = statistics.median(m["three"]), statistics.median(m["one"])
                    print(f"{t} {op} {size} c{conc}: three servers {a:.0f} ops/s, one {b:.0f} ops/s ({a / b:.2f}x)", flush=True)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
            etcd.terminate()
            etcd.wait(timeout=20)
    results.write(args.out, "kvspread", targets, args.rounds, args.xfer, extra={"cases": args.cases, "scale": args.scale})


if __name__ == "__main__":
    main()
