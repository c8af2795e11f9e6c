#!/usr/bin/env python3
"""The Python binding against the Go connector: a 64 MiB tensor put and
got through python/xfer (tools/bench/python_putget.py, with the venv
make python installs the package into) against BenchmarkPutGetTensor64M (connector/bench_test.go)
doing the same in Go, on tcp and shm, in interleaved rounds.

Goal: the Python put+get at 0.8x the Go connector's or more. Needs `make
python` (the library, the wheel and the venv) first; writes bench-out/python.json.

With --latency-iters N (2000 by default; 0 skips it) each round also times N
put+gets of a 4 KiB tensor one by one, through Python (python_putget.py
--latency-iters) and in Go (BenchmarkPutGet4K, as connector.py runs it): the
latency table's python-T-putget-4k rows, Python's p50, p99 and p99.9 beside
Go's. They have no goal: they show what a small value costs from Python."""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connector as connbench  # noqa: E402
import results  # noqa: E402

ROOT = results.ROOT
GOAL = ">= 0.8"


def go_run(testbin, transport, iters):
    out = subprocess.run([testbin, "-test.run", "^$", "-test.bench", f"^BenchmarkPutGetTensor64M$/^{transport}$",
                          "-test.benchtime", f"{iters}x"], cwd=os.path.join(ROOT, "connector"),
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"([\d.]+) MB/s", out)
    if not m:
        raise SystemExit(f"no MB/s in the Go benchmark's output:\n{out}")
    return float(m.group(1)) * 1e6


def py_args(transport, iters, latency_iters):
    return ["tools/bench/python_putget.py", "--transport", transport, "--size-mb", "64", "--iters", str(iters),
            "--latency-iters", str(latency_iters)]


def py_run(python, transport, iters, latency_iters):
    out = subprocess.run([python] + py_args(transport, iters, latency_iters), cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="put+get pairs per measurement")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--latency-iters", type=int, default=2000,
                    help="4 KiB put+gets per round for the latency rows, in Python and in Go; 0 skips them")
    ap.add_argument("--python", default=os.path.join(ROOT, "build/python/venv/bin/python"),
                    help="the interpreter that runs the binding: make python's venv by default")
    ap.add_argument("--out", default=results.default_path("python"))
    args = ap.parse_args()
    testbin = os.path.join(ROOT, "bench-out", "connector.test")
    os.makedirs(os.path.dirname(testbin), exist_ok=True)
    subprocess.run(["go", "test", "-c", "-o", testbin, "./connector"], cwd=ROOT, check=True)
    targets, rows = [], []
    for tr in args.transports.split(","):
        gos, pys, golat, peak, copied = [], [], [], 0, 0
        for r in range(args.rounds):
            def go():
                gos.append(go_run(testbin, tr, args.iters))
                if args.latency_iters > 0:
                    golat.append(connbench.latency_run(testbin, tr, args.latency_iters, 600))
            pair = [go, lambda: pys.append(py_run(args.python, tr, args.iters, args.latency_iters))]
            for f in (pair if r % 2 == 0 else pair[::-1]):
                f()
            peak = max(peak, pys[-1]["python_peak_alloc_bytes"])
            copied = max(copied, pys[-1]["get_copied_bytes"])
            print(f"{tr} round {r + 1}: Go {gos[-1] / 1e9:.3f} GB/s, Python {pys[-1]['bytes_per_sec'] / 1e9:.3f} GB/s",
                  flush=True)
        gcmd = ("go test -c -o bench-out/connector.test ./connector && (cd connector && ../bench-out/connector.test " +
                shlex.join(["-test.run", "^$", "-test.bench", f"^BenchmarkPutGetTensor64M$/^{tr}$", "-test.benchtime",
                            f"{args.iters}x"]) + ")")
        pcmd = shlex.join([os.path.relpath(args.python, ROOT)] + py_args(tr, args.iters, args.latency_iters))
        targets.append(results.target(
            f"python-{tr}-putget-64m", "python", f"{tr} put + get of a 64 MiB tensor from Python, against the Go connector",
            "B/s", results.series([p["bytes_per_sec"] for p in pys], pcmd),
            results.series(gos, gcmd, "Go connector (BenchmarkPutGetTensor64M)"), results.goal(GOAL)))
        t = targets[-1]
        if args.latency_iters > 0:
            lcmd = ("go test -c -o bench-out/connector.test ./connector && (cd connector && ../bench-out/connector.test " +
                    shlex.join(connbench.latency_args(tr, args.latency_iters)) + ")")
            targets.append(results.latency_target(
                f"python-{tr}-putget-4k", "python", f"{tr} put + get of a 4 KiB tensor from Python, against the Go connector",
                results.series([], pcmd, latency=results.latency([p["latency_4k"] for p in pys])),
                results.series([], lcmd, "Go connector (BenchmarkPutGet4K)",
                               latency=results.latency([dict(zip(results.LATENCY_KEYS, x)) for x in golat]))))
            print(f"{tr}: 4 KiB put+get p50 Python {targets[-1]['xfer']['latency']['p50_us']:.1f} µs, "
                  f"Go {targets[-1]['peer']['latency']['p50_us']:.1f} µs", flush=True)
        rows.append((tr, t["peer"]["median"], t["xfer"]["median"], t["ratio"], peak, copied))
    results.write(args.out, "python", targets, args.rounds, args.python, extra={"size_mb": 64, "iters": args.iters})
    print()
    print(f"64 MiB put+get, {args.iters} per measurement, medians of {args.rounds} rounds:")
    print("| transport | Go connector | Python binding | ratio | Python's peak allocation in a put+get | bytes the get copied |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tr, g, p, ratio, peak, copied in rows:
        print(f"| {tr} | {g / 1e9:.2f} GB/s | {p / 1e9:.2f} GB/s | {ratio:.2f} | {peak / 1024:.0f} KiB | {copied} |")


if __name__ == "__main__":
    main()
