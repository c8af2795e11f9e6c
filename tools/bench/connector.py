#!/usr/bin/env python3
"""The connector's `xfer transfer` against `xfer bench` (docs/BENCHMARKS.md, "The connector").

For each transport, ROUNDS interleaved rounds of, in this order (reversed in
even rounds):
  xfer bench --transport T --op write --size SIZE --depth 1 --iters N --json
  xfer transfer --benchmark --mode copy     (a producer and a consumer process)
  xfer transfer --benchmark --mode zerocopy
with SIZE = --size-mb MiB tensors and N = --transfers. `xfer bench` moves the
same bytes with the engine's one-sided WRITE, the path a Get takes by
default (the producer WRITEs into the consumer's buffer), and starts its own
target process; the transfer's two roles run on --host with the ports
19450 (producer), 19452 (consumer) and 19451 (control).

Figures, per round: for a transfer, the median over its transfers of the
consumer's per-transfer rate (the first transfer, which also connects, is
in it; the median is robust to it), get = SIZE / the Get's time, e2e =
SIZE / (the producer's Put + the Get); for bench its bytes_per_sec. The
targets, with the medians of the rounds:
  connector-T-get-Sm:       transfer get (copy mode) / bench WRITE, goal >= 0.9
  connector-T-zerocopy-Sm:  transfer e2e, zerocopy / copy, no goal
  connector-T-putget-4k-p50, -p99: a 4 KiB tensor's Put then Get, in one
      process (BenchmarkPutGet4K of package connector, --latency-iters of
      them per round), against one 4 KiB READ of `xfer bench --op read`
      in the same round (a Get takes at least one round trip); goals
      (docs/BENCHMARKS.md): on tcp and rdma p50 <= 2x and p99 <= 3x the
      READ's, on shm p50 <= 10 µs (PUTGET_GOALS)
  connector-T-putget-4k (the latency table): the same runs' p50, p99 and
      p99.9 of both
The results file (tools/bench/results.py) goes to bench-out/connector.json
(bench-out/connector-rdma.json for --transports rdma), or to --out.

Usage: tools/bench/connector.py [--rounds N] [--transports tcp,shm] [--size-mb 256]
                                [--transfers 20] [--host ADDR] [--xfer PATH] [--out FILE]
Over SoftRoCE, in the VM (tools/bench/connector.sh does this for
--transports rdma), with a size SoftRoCE moves in reasonable time:
  XFER_DEVICE=rxe0 tools/rdma-vm/rdma-vm --rxe --timeout 2900 -- \\
      python3 tools/bench/connector.py --transports rdma --size-mb 16 --transfers 10
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PRODUCER_PORT, CTRL_PORT, CONSUMER_PORT = 19450, 19451, 19452
GOAL = ">= 0.9"
# The 4 KiB put+get's goals, by transport and percentile: on the ratio to
# the 4 KiB READ's, or on shm on its own p50 (a READ there is a memcpy).
PUTGET_GOALS = {("tcp", "p50"): ("<= 2.0", "ratio"), ("tcp", "p99"): ("<= 3.0", "ratio"),
                ("rdma", "p50"): ("<= 2.0", "ratio"), ("rdma", "p99"): ("<= 3.0", "ratio"),
                ("shm", "p50"): ("<= 10", "xfer")}


def putget_goal(transport, q):
    g = PUTGET_GOALS.get((transport, q))
    return results.goal(*g) if g else None


def fail(msg):
    sys.exit(f"connector.py: {msg}")


def bench_args(transport, size_mb, n):
    return ["bench", "--transport", transport, "--op", "write", "--size", f"{size_mb}MiB", "--depth", "1",
            "--iters", str(n), "--json"]


def bench_run(xfer, transport, size_mb, n, timeout):
    args = bench_args(transport, size_mb, n)
    try:
        p = subprocess.run([xfer] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"xfer {shlex.join(args)}: no result within {timeout} s")
    if p.returncode != 0:
        fail(f"xfer {shlex.join(args)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][0]
    r = json.loads(line)
    if r.get("transport") != transport:
        fail(f"xfer {shlex.join(args)}: ran over {r.get('transport')!r}, not {transport}")
    return r["bytes_per_sec"]


def transfer_args(role, host, transport, mode, size_mb, n):
    local, remote = (PRODUCER_PORT, CONSUMER_PORT) if role == "producer" else (CONSUMER_PORT, PRODUCER_PORT)
    return ["transfer", "--role", role, "--local-host", host, "--remote-host", host, "--local-port", str(local),
            "--remote-port", str(remote), "--ctrl-port", str(CTRL_PORT), "--transport", transport, "--mode", mode,
            "--tensor-size-mb", str(size_mb), "--num-transfers", str(n), "--benchmark", "--json"]


def transfer_run(xfer, host, transport, mode, size_mb, n, timeout):
    """One transfer run; the consumer's per-transfer get and e2e rates' medians."""
    pa = transfer_args("producer", host, transport, mode, size_mb, n)
    ca = transfer_args("consumer", host, transport, mode, size_mb, n)
    prod = subprocess.Popen([xfer] + pa, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        cons = subprocess.run([xfer] + ca, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        prod.kill()
        prod.wait()
        fail(f"xfer {shlex.join(ca)}: no result within {timeout} s")
    try:
        _, perr = prod.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        prod.kill()
        _, perr = prod.communicate()
    if cons.returncode != 0 or prod.returncode != 0:
        fail(f"xfer transfer --transport {transport} --mode {mode}: consumer exit {cons.returncode}: "
             f"{cons.stderr.strip()[-500:]}; producer exit {prod.returncode}: {perr.strip()[-500:]}")
    lines = [json.loads(l) for l in cons.stdout.splitlines() if l.startswith("{")]
    summary = lines[-1]
    if not summary.get("summary") or summary.get("transport") != transport or summary.get("transfers") != n:
        fail(f"xfer {shlex.join(ca)}: unexpected summary {summary}")
    ts = lines[:-1]
    get = statistics.median(t["bytes"] / t["seconds"] for t in ts)
    e2e = statistics.median(t["bytes"] / (t["seconds"] + t["put_seconds"]) for t in ts)
    return {"get": get, "e2e": e2e}


def build_connector_test(out):
    """Builds package connector's test binary (for BenchmarkPutGet4K) at out."""
    p = subprocess.run(["go", "test", "-c", "-o", out, "./connector"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"go test -c ./connector: {p.stderr.strip()[-500:]}")


def latency_args(transport, iters):
    return ["-test.run", "^$", "-test.bench", f"^BenchmarkPutGet4K$/^{transport}$", "-test.benchtime", f"{iters}x"]


def latency_run(testbin, transport, iters, timeout):
    """One BenchmarkPutGet4K run: its p50, p99 and p99.9 in µs (p99.9 None from a test binary without it)."""
    p = subprocess.run([testbin] + latency_args(transport, iters), cwd=os.path.join(ROOT, "connector"),
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"BenchmarkPutGet4K/{transport}: exit {p.returncode}: {(p.stdout + p.stderr).strip()[-500:]}")
    for line in p.stdout.splitlines():
        if line.startswith("BenchmarkPutGet4K/"):
            f = line.split()
            vals = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1) if f[i + 1].endswith("-µs")}
            return vals["p50-µs"], vals["p99-µs"], vals.get("p999-µs")
    fail(f"BenchmarkPutGet4K/{transport}: no result in {p.stdout[-500:]}")


def read4k_args(transport, iters):
    return ["bench", "--transport", transport, "--op", "read", "--size", "4KiB", "--depth", "1",
            "--iters", str(iters), "--json"]


def read4k_run(xfer, transport, iters, timeout):
    """One xfer bench READ 4 KiB run: its p50, p99 and p99.9 in µs (p99.9 None from an xfer without it)."""
    args = read4k_args(transport, iters)
    p = subprocess.run([xfer] + args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"xfer {shlex.join(args)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][0])
    return r["lat_p50_ns"] / 1e3, r["lat_p99_ns"] / 1e3, r["lat_p999_ns"] / 1e3 if "lat_p999_ns" in r else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transports", default="tcp,shm", help="tcp, shm, rdma (rdma in the VM)")
    ap.add_argument("--size-mb", type=int, default=256, help="tensor size in MiB (default 256)")
    ap.add_argument("--transfers", type=int, default=20, help="transfers per run, and bench's --iters (default 20)")
    ap.add_argument("--host", default="10.0.0.1" if os.environ.get("RDMA_VM") == "1" else "127.0.0.1",
                    help="the address both roles use (default 127.0.0.1; 10.0.0.1 in the VM)")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"), help="the xfer binary (default: ./xfer)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds one run may take (default 600)")
    ap.add_argument("--latency-iters", type=int, default=2000,
                    help="4 KiB put+get (and READs) per round for the latency targets; 0 skips them (default 2000)")
    ap.add_argument("--event-channel", action="store_true",
                    help="rdma: run xfer bench and xfer transfer with use_event_channel (pollers sleep instead of "
                         "busy-polling); under emulation busy pollers take the CPU the software device needs")
    ap.add_argument("--connector-test", help="a prebuilt test binary of package connector "
                                             "(default: built into the results file's directory)")
    ap.add_argument("--out", help="the results file (default: bench-out/connector.json; "
                                  "bench-out/connector-rdma.json when every transport is rdma)")
    args = ap.parse_args()
    if args.event_channel:
        os.environ["XFER_RDMA_USE_EVENT_CHANNEL"] = "true"
    if args.rounds < 1 or args.size_mb < 1 or args.transfers < 1:
        ap.error("--rounds, --size-mb and --transfers must be at least 1")
    transports = args.transports.split(",")
    for t in transports:
        if t not in ("tcp", "shm", "rdma"):
            ap.error(f"--transports: {t!r}: want tcp, shm or rdma")
    rdma = all(t == "rdma" for t in transports)
    if args.out is None:
        args.out = results.default_path("connector-rdma" if rdma else "connector")
    if not os.access(args.xfer, os.X_OK):
        ap.error(f"xfer binary {args.xfer} is not an executable file (make build, or go build -o xfer ./cmd/xfer)")
    size, n = args.size_mb, args.transfers
    sname = f"{size}m"
    targets, rows, lat_rows = [], [], []
    testbin = None
    if args.latency_iters > 0 and args.connector_test:
        testbin = os.path.abspath(args.connector_test)
    elif args.latency_iters > 0:
        testbin = os.path.join(os.path.dirname(os.path.abspath(args.out)), "connector.test")
        os.makedirs(os.path.dirname(testbin), exist_ok=True)
        build_connector_test(testbin)
    for transport in transports:
        runs = {"bench": [], "copy": [], "zerocopy": []}
        order = ["bench", "copy", "zerocopy"]
        for r in range(args.rounds):
            for what in (order if r % 2 == 0 else order[::-1]):
                if what == "bench":
                    runs["bench"].append(bench_run(args.xfer, transport, size, n, args.timeout))
                else:
                    runs[what].append(transfer_run(args.xfer, args.host, transport, what, size, n, args.timeout))
            print(f"{transport} round {r + 1}: bench {runs['bench'][-1] / 1e9:.3f} GB/s, "
                  f"copy get {runs['copy'][-1]['get'] / 1e9:.3f} e2e {runs['copy'][-1]['e2e'] / 1e9:.3f} GB/s, "
                  f"zerocopy get {runs['zerocopy'][-1]['get'] / 1e9:.3f} e2e {runs['zerocopy'][-1]['e2e'] / 1e9:.3f} GB/s",
                  flush=True)
        group = "connector-rdma" if transport == "rdma" else "connector"
        tcmd = lambda mode: ("xfer " + shlex.join(transfer_args("consumer", args.host, transport, mode, size, n)) +
                             " (and --role producer with the ports swapped)")
        bench = results.series(runs["bench"], "xfer " + shlex.join(bench_args(transport, size, n)), "xfer bench WRITE")
        targets.append(results.target(
            f"connector-{transport}-get-{sname}", group,
            f"{transport} Get of a {size} MiB tensor (xfer transfer, copy), against xfer bench WRITE", "B/s",
            results.series([x["get"] for x in runs["copy"]], tcmd("copy")), bench,
            results.goal(GOAL)))
        targets.append(results.target(
            f"connector-{transport}-zerocopy-{sname}", group,
            f"{transport} Put + Get of a {size} MiB tensor, zerocopy against copy", "B/s",
            results.series([x["e2e"] for x in runs["zerocopy"]], tcmd("zerocopy")),
            results.series([x["e2e"] for x in runs["copy"]], tcmd("copy"), "xfer transfer --mode copy")))
        if testbin:
            lat, rd = [], []
            for r in range(args.rounds):
                pair = [lambda: lat.append(latency_run(testbin, transport, args.latency_iters, args.timeout)),
                        lambda: rd.append(read4k_run(args.xfer, transport, args.latency_iters, args.timeout))]
                for f in (pair if r % 2 == 0 else pair[::-1]):
                    f()
                print(f"{transport} round {r + 1}: 4 KiB put+get p50 {lat[-1][0]:.1f} p99 {lat[-1][1]:.1f} µs; "
                      f"READ p50 {rd[-1][0]:.1f} p99 {rd[-1][1]:.1f} µs", flush=True)
            lcmd = ("go test -c -o connector.test ./connector && (cd connector && ../connector.test " +
                    shlex.join(latency_args(transport, args.latency_iters)) + ")")
            rcmd = "xfer " + shlex.join(read4k_args(transport, args.latency_iters))
            for i, q in ((0, "p50"), (1, "p99")):
                targets.append(results.target(
                    f"connector-{transport}-putget-4k-{q}", group,
                    f"{transport} Put + Get of a 4 KiB tensor, {q}, against one 4 KiB READ", "us",
                    results.series([x[i] for x in lat], lcmd), results.series([x[i] for x in rd], rcmd,
                                                                             f"xfer bench READ 4 KiB {q}"),
                    putget_goal(transport, q)))
            as_lat = lambda l: results.latency([dict(zip(results.LATENCY_KEYS, x)) for x in l])
            targets.append(results.latency_target(
                f"connector-{transport}-putget-4k", group,
                f"{transport} Put + Get of a 4 KiB tensor, against one 4 KiB READ",
                results.series([], lcmd, latency=as_lat(lat)),
                results.series([], rcmd, "xfer bench READ 4 KiB", latency=as_lat(rd))))
            lat_rows.append((transport, statistics.median(x[0] for x in lat), statistics.median(x[1] for x in lat),
                             statistics.median(x[0] for x in rd), statistics.median(x[1] for x in rd)))
        med = lambda l, k=None: statistics.median(x[k] for x in l) if k else statistics.median(l)
        rows.append((transport, med(runs["bench"]), med(runs["copy"], "get"), med(runs["zerocopy"], "get"),
                     med(runs["copy"], "e2e"), med(runs["zerocopy"], "e2e")))
    results.write(args.out, "connector", targets, args.rounds, args.xfer,
                  extra={"size_mb": size, "transfers": n, "host": args.host})
    print()
    print(f"{n} transfers of {size} MiB, medians of {args.rounds} rounds (GB/s):")
    print("| transport | xfer bench WRITE | get, copy | get, zerocopy | get / bench | put + get, copy | put + get, zerocopy | zerocopy / copy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for t, b, gc, gz, ec, ez in rows:
        print(f"| {t} | {b / 1e9:.3f} | {gc / 1e9:.3f} | {gz / 1e9:.3f} | {gc / b:.2f} | {ec / 1e9:.3f} | "
              f"{ez / 1e9:.3f} | {ez / ec:.2f} |")
    if lat_rows:
        print()
        print("4 KiB put+get against one 4 KiB READ, medians (µs):")
        print("| transport | put+get p50 | put+get p99 | READ p50 | READ p99 |")
        print("| --- | --- | --- | --- | --- |")
        for t, p50, p99, r50, r99 in lat_rows:
            print(f"| {t} | {p50:.1f} | {p99:.1f} | {r50:.1f} | {r99:.1f} |")


if __name__ == "__main__":
    main()
