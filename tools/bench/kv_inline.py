#!/usr/bin/env python3
"""Where inline values stop paying, for docs/KV.md and docs/BENCHMARKS.md.

For each transport and value size, GETs from one client against a server
that never inlines (--inline-max 0) and one that inlines everything up to
256 KiB, in turn, ROUNDS times; prints the medians of ops/s and p50. The
client's max_message is 1 MiB (XFER_MAX_MESSAGE), so that it accepts them.

Usage: tools/bench/kv_inline.py [--rounds N] [--xfer PATH] [--transports tcp,shm]
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIZES = ["1KiB", "4KiB", "16KiB", "32KiB", "64KiB", "128KiB"]


def bench(xfer, port, transport, size):
    out = subprocess.run([xfer, "kv", "bench", "--server-addr", f"127.0.0.1:{port}", "--transport", transport,
                          "--op", "get", "--value-size", size, "--keys", "1", "--ops", "5000", "--json"],
                         capture_output=True, text=True, check=True, timeout=300,
                         env=dict(os.environ, XFER_MAX_MESSAGE=str(1 << 20))).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["ops_per_sec"], r["lat_p50_ns"] / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"))
    ap.add_argument("--transports", default="tcp,shm")
    args = ap.parse_args()
    print("| transport | value | not inline: ops/s, p50 µs | inline: ops/s, p50 µs | inline / not |")
    print("| --- | --- | --- | --- | --- |")
    for transport in args.transports.split(","):
        servers = {}
        try:
            for name, im, port in (("off", "0", 19371), ("on", "256KiB", 19372)):
                servers[name] = subprocess.Popen([args.xfer, "kv", "serve", "--listen", f"127.0.0.1:{port}",
                                                  "--memory-mb", "128", "--transport", transport, "--inline-max", im],
                                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                servers[name].stdout.readline()
            for size in SIZES:
                res = {"off": [], "on": []}
                for _ in range(args.rounds):
                    res["off"].append(bench(args.xfer, 19371, transport, size))
                    res["on"].append(bench(args.xfer, 19372, transport, size))
                med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
                print(f"| {transport} | {size} | {med['off'][0]:.0f}, {med['off'][1]:.1f} | {med['on'][0]:.0f}, "
                      f"{med['on'][1]:.1f} | {med['on'][0] / med['off'][0]:.2f} |", flush=True)
        finally:
            for s in servers.values():
                s.terminate()
                s.wait(timeout=20)


if __name__ == "__main__":
    main()
