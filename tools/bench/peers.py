#!/usr/bin/env python3
"""Interleaved peer comparisons for docs/BENCHMARKS.md.

Runs each peer (iperf3, qperf, single-thread C memcpy) and the matching
`xfer bench` in turn, ROUNDS times (peer, xfer, peer, xfer, ...), on this
machine, unpinned on both sides, and prints the medians and ratios as a
Markdown table. Raw results go to bench-out/peers.json.

Usage: tools/bench/peers.py [--rounds N] [--xfer PATH]
Needs: iperf3, qperf, gcc (make bench-peers installs them with apt).
Only loopback addresses are used.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True, **kw).stdout


def xfer_bench(xfer, transport, op, size, depth, seconds):
    out = run([xfer, "bench", "--transport", transport, "--op", op, "--size", str(size),
               "--depth", str(depth), "--duration", f"{seconds}s", "--json"])
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    assert len(rows) == 1 and rows[0]["transport"] == transport, out
    return rows[0]


def iperf3(port=19301, seconds=3):
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        d = json.loads(run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"]))
        return d["end"]["sum_received"]["bits_per_second"] / 8
    finally:
        srv.wait(timeout=10)


def qperf_rtt_us(port=19302, seconds=3):
    srv = subprocess.Popen(["qperf", "-lp", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = run(["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), "-m", "64", "tcp_lat"])
        m = re.search(r"latency\s*=\s*([\d.]+)\s*(ns|us|ms)", out)
        v = float(m.group(1)) * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[m.group(2)]
        return 2 * v  # qperf reports one way: RTT/2
    finally:
        srv.kill()
        srv.wait()


def memcpy_bps(binary, size, seconds=2):
    return float(run([binary, str(size), str(seconds)]).strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"))
    a = ap.parse_args()
    os.makedirs(os.path.join(ROOT, "bench-out"), exist_ok=True)
    memcpy = os.path.join(ROOT, "bench-out", "memcpy")
    subprocess.run(["gcc", "-O2", "-o", memcpy, os.path.join(HERE, "memcpy.c")], check=True)

    series = {}

    def add(key, v):
        series.setdefault(key, []).append(v)

    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
        add("iperf3_bps", iperf3())
        add("tcp_write_1m_bps", xfer_bench(a.xfer, "tcp", "write", "1MiB", 4, 3)["bytes_per_sec"])
        add("iperf3_bps", iperf3())
        add("tcp_read_1m_bps", xfer_bench(a.xfer, "tcp", "read", "1MiB", 4, 3)["bytes_per_sec"])
        add("qperf_rtt_us", qperf_rtt_us())
        add("tcp_write_64_p50_us", xfer_bench(a.xfer, "tcp", "write", 64, 1, 3)["lat_p50_ns"] / 1e3)
        for size, name in ((1 << 20, "1m"), (16 << 20, "16m")):
            for op in ("write", "read"):
                add(f"memcpy_{name}_bps", memcpy_bps(memcpy, size))
                add(f"shm_{op}_{name}_bps", xfer_bench(a.xfer, "shm", op, size, 1, 2)["bytes_per_sec"])
        row = xfer_bench(a.xfer, "tcp", "read", "4KiB", 1, 3)
        add("tcp_read_4k_p50_us", row["lat_p50_ns"] / 1e3)
        add("tcp_read_4k_p99_us", row["lat_p99_ns"] / 1e3)

    with open(os.path.join(ROOT, "bench-out", "peers.json"), "w") as f:
        json.dump(series, f, indent=1)
    med = {k: statistics.median(v) for k, v in series.items()}
    gb = lambda v: f"{v / 1e9:.2f} GB/s"
    rows = [
        ("tcp WRITE 1 MiB, depth 4", gb(med["tcp_write_1m_bps"]), "iperf3 one stream", gb(med["iperf3_bps"]),
         med["tcp_write_1m_bps"] / med["iperf3_bps"], "≥ 1.0"),
        ("tcp READ 1 MiB, depth 4", gb(med["tcp_read_1m_bps"]), "iperf3 one stream", gb(med["iperf3_bps"]),
         med["tcp_read_1m_bps"] / med["iperf3_bps"], "≥ 1.0"),
        ("tcp WRITE 64 B round trip p50", f"{med['tcp_write_64_p50_us']:.1f} µs", "qperf tcp_lat ×2", f"{med['qperf_rtt_us']:.1f} µs",
         med["tcp_write_64_p50_us"] / med["qperf_rtt_us"], "≤ 1.2"),
    ]
    for name, label in (("1m", "1 MiB"), ("16m", "16 MiB")):
        for op in ("write", "read"):
            rows.append((f"shm {op.upper()} {label}, depth 1", gb(med[f"shm_{op}_{name}_bps"]), "C memcpy, 1 thread",
                         gb(med[f"memcpy_{name}_bps"]), med[f"shm_{op}_{name}_bps"] / med[f"memcpy_{name}_bps"], "≥ 0.8"))
    print(f"Medians of {a.rounds} interleaved rounds.\n")
    print("| target | xfer | peer | peer figure | ratio | goal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, x, peer, pv, ratio, goal in rows:
        print(f"| {name} | {x} | {peer} | {pv} | {ratio:.2f} | {goal} |")
    print(f"| tcp READ 4 KiB (page fetch), depth 1 | p50 {med['tcp_read_4k_p50_us']:.1f} µs, p99 {med['tcp_read_4k_p99_us']:.1f} µs | (absolute) | | | p50 < 30 µs, p99 < 100 µs |")
    print("\nPer-round values:\n")
    for k, v in series.items():
        print(f"- {k}: " + ", ".join(f"{x:.4g}" for x in v))


if __name__ == "__main__":
    main()
