#!/usr/bin/env python3
"""The KV service against Redis (docs/BENCHMARKS.md, "The KV service").

For each transport (tcp, shm), operation (GET, PUT/SET), value size (4 KiB,
1 MiB) and client count (1, 16) it runs `xfer kv bench` against a running
`xfer kv serve` and `redis-benchmark` against redis-server on the same
machine, in turn, ROUNDS times (xfer, redis, xfer, redis, ...), and prints
the medians and ratios as a Markdown table. Both use one key, as
redis-benchmark does without -r. Each target also carries both sides'
p50, p99 and p99.9 (the medians of each round's), for the latency table:
xfer's from its JSON line, Redis's from redis-benchmark's summary and its
percentile distribution (parse_redis_benchmark). The results file (tools/bench/results.py)
goes to bench-out/kv.json (bench-out/kv-rdma.json for --transports rdma),
or to --out.

With --xfer-b, a second binary's server and client run in every round too,
in alternating order with the first (A, Redis, B; then B, Redis, A; ...),
so that tools/bench/ab.sh can compare two builds against the same Redis
runs. --secret-file-b FILE gives B's server and clients the shared secret in
FILE (A runs without one): with the same binary as --xfer and --xfer-b, an
A/B of what authentication costs.

For the tcp GET of 1 MiB with one client, each round also runs the loopback
floor, tools/bench/tcp_pingpong.c with reno (48-byte requests answered by
48 B + 1 MiB on blocking sockets: what no request/response over TCP beats
here), right after Redis: the kv-tcp-get-1m-c1-floor target (no goal).

--requests grpc sends the requests as gRPC calls (the default, data, sends
them on the data plane); its targets' ids end in -grpc.

Usage: tools/bench/kv.py [--rounds N] [--xfer PATH] [--xfer-b PATH] [--secret-file-b FILE]
                         [--out FILE] [--transports tcp,shm] [--requests data|grpc]
                         [--scale F] [--procs N] [--tail-procs N]

--procs N runs the xfer server and clients with GOMAXPROCS=N (default: Go's,
one P per CPU). Redis and redis-benchmark run one thread each; on a small
machine that both sides share, --procs 1 gives xfer the same thread budget.
A second pass measures the p99 targets (kv-T-OP-4k-c16-p99, at most 1.5x
Redis's p99): 16 clients' 4 KiB GETs and PUTs over tcp and shm with the
xfer processes at GOMAXPROCS=N of --tail-procs (default 1, Redis's thread
budget; 0 skips the pass), interleaved with Redis again. The same rounds'
operations per second are the kv-T-OP-4k-c16-p99-rate targets (at least
1.0x Redis's): the tail goal counts only with the rate kept.
In the VM, over SoftRoCE (XFER_DEVICE=rxe0 picks the device):
  XFER_DEVICE=rxe0 tools/rdma-vm/rdma-vm --rxe --timeout 3000 -- \\
      python3 tools/bench/kv.py --transports rdma --scale 0.1
Needs: redis-server and redis-benchmark (make bench-kv installs them).
Only loopback addresses are used, but with --netns:

--netns runs the tcp rows across two network namespaces joined by a veth
pair (tools/bench/netns.py; needs root): redis-server and
`xfer kv serve --listen 10.77.0.1:19351 --data-listen 10.77.0.1:19352
--transport tcp` in one, redis-benchmark -h 10.77.0.1 and xfer kv bench
--server-addr 10.77.0.1:19351 in the other, with the system's congestion
control at both ends, as between two hosts. Their ids end in -netns
(-netns-50us with --netem-delay 50us), beside the loopback rows. shm is
skipped; the floor runs tcp_pingpong.c's two ends in the two namespaces
(the floor of a 1 MiB GET over the link, with the system's algorithm).
"""
import argparse
import contextlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

import netns
import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KV_PORT, DATA_PORT, REDIS_PORT = 19351, 19352, 19353
B_OFFSET = 10  # the second binary's server listens 10 ports up

XFER_ENV = None  # the environment of xfer's processes (--procs)
SCALE = 1.0
# With --netns: the link, whose namespaces the servers and the clients run
# in; HOST is the servers' address.
LINK = None
HOST = "127.0.0.1"
SUFFIX, WHERE = "", ""  # of the targets' ids and names


def server(cmd):
    """cmd, run where the servers run."""
    return LINK.server(cmd) if LINK else cmd


def client(cmd):
    """cmd, run where the clients run."""
    return LINK.client(cmd) if LINK else cmd

# GET 4 KiB at 1.0x Redis's operations per second, GET 1 MiB at 3x its
# bytes per second (the same ratio at one value size); PUT has no goal.
GOALS = {("get", 4096): ">= 1.0", ("get", 1 << 20): ">= 3.0"}
# 16 clients' 4 KiB GETs and PUTs: p99 at most 1.5x Redis's (--tail-procs).
TAIL_GOAL = "<= 1.5"


def run(cmd, timeout=300, env=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True, env=env).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"kv.py: {shlex.join(cmd)}: exit {e.returncode}: {e.stderr.strip()[-500:]}")


def ops_for(size, conc):
    if size >= 1 << 20:
        n = 400 if conc == 1 else 800
    else:
        n = 20000 if conc == 1 else 40000
    return max(int(n * SCALE), 20)


def xfer_args(port, transport, op, size, conc, requests, extra=()):
    return ["kv", "bench", *extra, "--server-addr", f"{HOST}:{port}", "--transport", transport,
            "--requests", requests, "--op", op, "--value-size", str(size), "--concurrency", str(conc),
            "--keys", "1", "--ops", str(ops_for(size, conc)), "--json"]


def xfer_run(xfer, args):
    out = run(client([xfer] + args), env=XFER_ENV)
    lines = out.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        sys.exit(f"kv.py: {xfer} {shlex.join(args)}: no JSON line in:\n{out}")
    r = json.loads(lines[-1])
    want = args[args.index("--transport") + 1]
    if r.get("transport") != want:
        sys.exit(f"kv.py: {xfer} {shlex.join(args)}: ran over {r.get('transport')!r}, not {want}")
    return {"ops_per_sec": r["ops_per_sec"], "bytes_per_sec": r["bytes_per_sec"],
            "p50_us": r["lat_p50_ns"] / 1e3, "p99_us": r["lat_p99_ns"] / 1e3,
            "p999_us": r["lat_p999_ns"] / 1e3 if "lat_p999_ns" in r else None}


def redis_args(op, size, conc):
    test = "get" if op == "get" else "set"
    host = ["-h", HOST] if LINK else []
    return ["redis-benchmark", *host, "-p", str(REDIS_PORT), "-t", test, "-d", str(size), "-c", str(conc),
            "-n", str(ops_for(size, conc)), "--precision", "3"]


def parse_redis_benchmark(out):
    """ops/s, p50, p99 and p99.9 (µs) of one test's full (not -q, not --csv) redis-benchmark output.

    The throughput and p50 and p99 come from its "Summary:"; p99.9 from its
    "Latency by percentile distribution:" (HdrHistogram's percentile steps,
    50%, 75%, 87.5%, ...): the latency of the first step whose cumulative
    count reaches 99.9% of the requests, which is the 99.9th percentile at
    the histogram's precision (or, where 99.9% of the count falls exactly
    on a step's lower edge, the next value up). redis-benchmark 7 prints
    both; --csv prints no distribution. ValueError when a part is missing."""
    lines = [l.strip() for l in re.split(r"[\r\n]+", out)]
    total = None
    m = re.search(r"^\s*(\d+) requests completed in", out, re.M)
    if m:
        total = int(m.group(1))
    m = re.search(r"throughput summary:\s*([0-9.]+) requests per second", out)
    if not m:
        raise ValueError("redis-benchmark: no 'throughput summary' (was it run with -q or --csv?)")
    rps = float(m.group(1))
    summary = None
    for i, l in enumerate(lines):
        if l.startswith("latency summary"):
            head = lines[i + 1].split()
            vals = lines[i + 2].split()
            if len(head) != len(vals):
                raise ValueError(f"redis-benchmark: a latency summary of {head} against {vals}")
            summary = {h: float(v) * 1e3 for h, v in zip(head, vals)}  # ms -> µs
            break
    if not summary or "p50" not in summary or "p99" not in summary:
        raise ValueError("redis-benchmark: no latency summary with p50 and p99")
    p999 = None
    step = re.compile(r"^([0-9.]+)% <= ([0-9.]+) milliseconds \(cumulative count (\d+)\)$")
    try:
        start = lines.index("Latency by percentile distribution:")
    except ValueError:
        raise ValueError("redis-benchmark: no 'Latency by percentile distribution:'") from None
    for l in lines[start + 1:]:
        m = step.match(l)
        if not m:
            break
        if total is None:
            raise ValueError("redis-benchmark: no 'N requests completed' line")
        if int(m.group(3)) >= 0.999 * total:
            p999 = float(m.group(2)) * 1e3
            break
    if p999 is None:
        raise ValueError("redis-benchmark: the percentile distribution does not reach 99.9%")
    return {"ops_per_sec": rps, "p50_us": summary["p50"], "p99_us": summary["p99"], "p999_us": p999}


def redis_run(op, size, conc):
    if op == "get":
        host = ["-h", HOST] if LINK else []
        run(client(["redis-benchmark", *host, "-p", str(REDIS_PORT), "-t", "set", "-d", str(size), "-n", "10",
                    "-c", "1"]))
    out = run(client(redis_args(op, size, conc)))
    try:
        r = parse_redis_benchmark(out)
    except ValueError as e:
        sys.exit(f"kv.py: {shlex.join(redis_args(op, size, conc))}: {e}:\n{out[-1500:]}")
    r["bytes_per_sec"] = r["ops_per_sec"] * size
    return r


def serve(xfer, transport, offset, extra=()):
    srv = subprocess.Popen(server([xfer, "kv", "serve", *extra, "--listen", f"{HOST}:{KV_PORT + offset}",
                                   "--data-listen", f"{HOST}:{DATA_PORT + offset}", "--memory-mb", "512",
                                   "--transport", transport]), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=XFER_ENV)
    if not srv.stdout.readline():
        srv.wait(timeout=20)
        sys.exit(f"kv.py: {xfer} kv serve --transport {transport} exited ({srv.returncode}) before it listened")
    return srv


def interleave(binaries, rounds, transport, op, size, conc, requests, floor=None):
    """ROUNDS interleaved rounds of each binary and Redis (A, Redis, B; then B, Redis, A; ...):
    each binary's results (by its key), Redis's, and floor's (a function run each round right
    after Redis; none without it)."""
    xs = {w[0]: [] for w in binaries}
    rs, fs = [], []
    for r in range(rounds):
        order = binaries if r % 2 == 0 else binaries[::-1]
        first = order[0]
        xs[first[0]].append(xfer_run(first[1], xfer_args(KV_PORT + first[2], transport, op, size, conc, requests,
                                                         first[3])))
        rs.append(redis_run(op, size, conc))
        if floor:
            fs.append(floor())
        for w, path, offset, extra in order[1:]:
            xs[w].append(xfer_run(path, xfer_args(KV_PORT + offset, transport, op, size, conc, requests, extra)))
    return xs, rs, fs


# The loopback floor of a one-client 1 MiB GET over TCP: tools/bench/tcp_pingpong.c
# (48-byte requests answered by 48 B + 1 MiB on blocking sockets), with the
# congestion control xfer gives a peer on the same host.
FLOOR_PORT, SAME_HOST_CC = 19354, "reno"


def floor_cmd(binary, role=None):
    """tcp_pingpong.c's command line: on loopback, both ends with reno; in netns
    mode, the role's end (server, client) at HOST with the system's algorithm."""
    if role:
        return [binary, str(FLOOR_PORT), "system", role, HOST]
    return [binary, str(FLOOR_PORT), SAME_HOST_CC]


def parse_pingpong(out):
    """ops/s, p50, p99 and p99.9 (µs) of tcp_pingpong's line."""
    m = re.search(r"([\d.]+) ops/s .* p50 ([\d.]+) us p99 ([\d.]+) us p99\.9 ([\d.]+) us", out)
    if not m:
        raise ValueError(f"tcp_pingpong printed no result: {out.strip()[-300:]}")
    ops, p50, p99, p999 = map(float, m.groups())
    return {"ops_per_sec": ops, "bytes_per_sec": ops * (1 << 20), "p50_us": p50, "p99_us": p99, "p999_us": p999}


def floor_run(binary):
    if LINK:
        srv = subprocess.Popen(server(floor_cmd(binary, "server")), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            if srv.stdout.readline().strip() != "listening":
                sys.exit(f"kv.py: {shlex.join(floor_cmd(binary, 'server'))}: {srv.stderr.read()[-300:]}")
            out = run(client(floor_cmd(binary, "client")))
            srv.wait(timeout=60)
        finally:
            srv.kill()
            srv.wait()
    else:
        out = run(floor_cmd(binary))
    try:
        return parse_pingpong(out)
    except ValueError as e:
        sys.exit(f"kv.py: {shlex.join(floor_cmd(binary))}: {e}")


@contextlib.contextmanager
def serving(binaries, transport):
    """Each binary's server over transport, for the with block."""
    servers = []
    try:
        for _, path, offset, extra in binaries:
            servers.append(serve(path, transport, offset, extra))
        yield
    finally:
        for srv in servers:
            srv.terminate()
            srv.wait(timeout=20)


def kv_target(tid, group, name, unit, key, xs, rs, xcmd, rcmd, peer_name, goal):
    """A target of each round's figure key: xfer's (A's, and B's if it ran) against Redis's, with
    both sides' latencies; goal is its text or None."""
    vals = lambda l: [x[key] for x in l]
    return results.target(
        tid, group, name, unit, results.series(vals(xs["a"]), xcmd, latency=results.latency(xs["a"])),
        results.series(vals(rs), shlex.join(rcmd), peer_name, latency=results.latency(rs)),
        results.goal(goal) if goal else None, xfer_b=results.series(vals(xs["b"])) if "b" in xs else None)


def tail_pass(args, binaries, targets):
    """The p99 targets: 16 clients' 4 KiB GETs and PUTs with each xfer process at
    GOMAXPROCS=args.tail_procs, Redis's thread budget, against Redis's p99 in the same rounds."""
    global XFER_ENV
    saved, XFER_ENV = XFER_ENV, dict(os.environ, GOMAXPROCS=str(args.tail_procs))
    try:
        for transport in args.transports.split(","):
            if transport == "rdma":
                continue
            with serving(binaries, transport):
                for op in ("get", "put"):
                    xs, rs, _ = interleave(binaries, args.rounds, transport, op, 4096, 16, args.requests)
                    xcmd = (f"GOMAXPROCS={args.tail_procs} xfer "
                            + shlex.join(xfer_args(KV_PORT, transport, op, 4096, 16, args.requests)))
                    name = (f"{transport} {op.upper()}{' (SET)' if op == 'put' else ''} 4 KiB, 16 clients, p99, "
                            f"GOMAXPROCS={args.tail_procs} a side{', gRPC requests' if args.requests == 'grpc' else ''}")
                    base = f"kv-{transport}-{op}-4k-c16-p99{'-grpc' if args.requests == 'grpc' else ''}"
                    t = kv_target(base + SUFFIX, "kv", name + WHERE, "us", "p99_us", xs, rs, xcmd,
                                  redis_args(op, 4096, 16), "redis-benchmark p99", TAIL_GOAL)
                    targets.append(t)
                    # The same rounds' rate: the p99 goal holds only with
                    # the throughput at or above Redis's.
                    rate = lambda l: [x["ops_per_sec"] for x in l]
                    r = results.target(
                        base + "-rate" + SUFFIX, "kv", name.replace(", p99,", ", ops/s of the p99 rounds,") + WHERE,
                        "ops/s",
                        results.series(rate(xs["a"]), xcmd),
                        results.series(rate(rs), shlex.join(redis_args(op, 4096, 16)), "redis-benchmark"),
                        results.goal(GOALS[("get", 4096)]),
                        xfer_b=results.series(rate(xs["b"])) if "b" in xs else None)
                    targets.append(r)
                    print(f"{transport} {op} 4096 c=16 GOMAXPROCS={args.tail_procs}: xfer p99 "
                          f"{t['xfer']['median']:.0f} µs, redis p99 {t['peer']['median']:.0f} µs, ratio "
                          f"{t['ratio']:.2f}; xfer {r['xfer']['median']:,.0f} ops/s, redis "
                          f"{r['peer']['median']:,.0f} ops/s, ratio {r['ratio']:.2f}", flush=True)
    finally:
        XFER_ENV = saved


def link_info(link):
    """The results file's record of where the run's two ends were."""
    if not link:
        return {"link": "loopback"}
    return {"link": "netns", "link_detail": link.describe(), "netem_delay": link.delay,
            "congestion": link.congestion}


def lat(row, who):
    """p50 / p99 / p99.9 of who's medians in row, in µs."""
    return " / ".join("-" if row[f"{who}_{k}"] is None else f"{row[f'{who}_{k}']:.1f}" for k in results.LATENCY_KEYS)


def size_name(size):
    return "4k" if size == 4096 else "1m"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"), help="the xfer binary (default: ./xfer)")
    ap.add_argument("--xfer-b", help="a second xfer binary, run interleaved with the first (A/B)")
    ap.add_argument("--out", help="the results file (default: bench-out/kv.json; bench-out/kv-rdma.json "
                                  "when every transport is rdma)")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--requests", default="data", choices=("data", "grpc"))
    ap.add_argument("--secret-file-b", help="B's server and clients run with this secret file (A without)")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the operation counts (0.1 in the VM)")
    ap.add_argument("--procs", type=int, default=0, help="GOMAXPROCS of the xfer processes (default: Go's)")
    ap.add_argument("--tail-procs", type=int, default=1,
                    help="GOMAXPROCS of the xfer processes for the 16-client p99 targets (default 1; 0: skip them)")
    ap.add_argument("--netns", action="store_true",
                    help="run the tcp rows across two network namespaces joined by a veth pair (needs root); "
                         "shm is skipped")
    ap.add_argument("--netem-delay", metavar="D",
                    help="with --netns: a netem delay on each end's egress, e.g. 50us (a round trip grows by 2 D)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.tail_procs < 0:
        ap.error("--tail-procs must be at least 0 (0 skips the p99 pass)")
    netns.check_delay_arg(ap, args.netns, args.netem_delay)
    if args.netns:
        asked = args.transports.split(",")
        if "rdma" in asked:
            ap.error("--netns runs tcp only (rdma runs in tools/rdma-vm)")
        if "tcp" not in asked:
            ap.error("--netns runs the tcp rows: give --transports tcp (shm is skipped there)")
        if "shm" in asked:
            print("netns: shm is skipped (it joins two processes of one host, not two hosts)", flush=True)
        args.transports = "tcp"
    if args.out is None:
        rdma = all(t == "rdma" for t in args.transports.split(","))
        args.out = results.default_path("kv-rdma" if rdma else "kv-netns" if args.netns else "kv")
    if args.secret_file_b and not args.xfer_b:
        ap.error("--secret-file-b needs --xfer-b (it may be the same binary as --xfer)")
    if args.secret_file_b and not os.access(args.secret_file_b, os.R_OK):
        ap.error(f"--secret-file-b {args.secret_file_b} is not a readable file (make one with: xfer secret > FILE)")
    for x in filter(None, (args.xfer, args.xfer_b)):
        if not os.access(x, os.X_OK):
            ap.error(f"xfer binary {x} is not an executable file (make build, or go build -o xfer ./cmd/xfer)")
    global SCALE, XFER_ENV
    SCALE = args.scale
    if args.procs > 0:
        XFER_ENV = dict(os.environ, GOMAXPROCS=str(args.procs))
    procs = os.environ.get("GOMAXPROCS", f"Go's default ({os.cpu_count()} CPUs)") if args.procs <= 0 else str(args.procs)
    print(f"xfer GOMAXPROCS: {procs}; Redis: one thread each", flush=True)
    # (which, binary, port offset, extra options of its server and clients)
    b_extra = ("--secret-file", args.secret_file_b) if args.secret_file_b else ()
    binaries = [("a", args.xfer, 0, ())] + ([("b", args.xfer_b, B_OFFSET, b_extra)] if args.xfer_b else [])
    if not args.netns:
        measure(args, binaries, procs)
        return
    global LINK, HOST, SUFFIX, WHERE
    try:
        with netns.Link(args.netem_delay) as link:
            LINK, HOST, SUFFIX = link, link.server_addr, netns.suffix(link.delay)
            WHERE = ", two namespaces over a veth" + (f", netem {link.delay} each way" if link.delay else "")
            print(f"netns: {link.describe()}", flush=True)
            measure(args, binaries, procs)
    except netns.Error as e:
        sys.exit(f"kv.py: {e}")


def measure(args, binaries, procs):
    """The passes, the results file and the summary."""
    # Across the link, Redis's protected mode (no password, not loopback)
    # would refuse the client; the link is private to this run.
    unprotected = ["--protected-mode", "no"] if LINK else []
    redis = subprocess.Popen(server(["redis-server", "--port", str(REDIS_PORT), "--bind", HOST, *unprotected,
                                     "--save", "", "--appendonly", "no"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pingpong = os.path.join(ROOT, "bench-out", "tcp_pingpong")
    if "tcp" in args.transports.split(","):
        os.makedirs(os.path.dirname(pingpong), exist_ok=True)
        subprocess.run(["gcc", "-O2", "-o", pingpong, os.path.join(HERE, "tcp_pingpong.c")], check=True)
    rows, targets = [], []
    try:
        time.sleep(0.5)
        for transport in args.transports.split(","):
            with serving(binaries, transport):
                for op in ("get", "put"):
                    for size in (4096, 1 << 20):
                        for conc in (1, 16):
                            floor = (transport == "tcp" and op == "get" and size == 1 << 20 and conc == 1
                                     and args.requests == "data")
                            xs, rs, fs = interleave(binaries, args.rounds, transport, op, size, conc, args.requests,
                                                    (lambda: floor_run(pingpong)) if floor else None)
                            med = lambda l, k: statistics.median(x[k] for x in l)
                            row = {"transport": transport, "op": op, "size": size, "conc": conc,
                                   "xfer_gomaxprocs": procs, "xfer": xs["a"], "redis": rs}
                            for k in ("ops_per_sec", "bytes_per_sec"):
                                row["xfer_" + k], row["redis_" + k] = med(xs["a"], k), med(rs, k)
                            for k, v in results.latency(xs["a"]).items():
                                row["xfer_" + k] = v
                            for k, v in results.latency(rs).items():
                                row["redis_" + k] = v
                            rows.append(row)
                            g = GOALS.get((op, size)) if transport != "rdma" else None
                            label = (f"{transport} {op.upper()}{' (SET)' if op == 'put' else ''} "
                                     f"{'4 KiB' if size == 4096 else '1 MiB'}, {conc} client{'s' if conc > 1 else ''}"
                                     f"{', gRPC requests' if args.requests == 'grpc' else ''}")
                            xcmd = "xfer " + shlex.join(xfer_args(KV_PORT, transport, op, size, conc, args.requests))
                            t = kv_target(f"kv-{transport}-{op}-{size_name(size)}-c{conc}"
                                          f"{'-grpc' if args.requests == 'grpc' else ''}{SUFFIX}",
                                          "kv" if transport != "rdma" else "kv-rdma", label + WHERE, "ops/s",
                                          "ops_per_sec", xs, rs, xcmd, redis_args(op, size, conc), "redis-benchmark",
                                          g)
                            targets.append(t)
                            if floor:
                                # What no request/response over loopback TCP (or over
                                # the link) can beat here (no goal).
                                what = "the link's floor" if LINK else "the loopback floor"
                                fname = (f"link floor (tcp_pingpong.c, {LINK.congestion})" if LINK
                                         else f"loopback floor (tcp_pingpong.c, {SAME_HOST_CC})")
                                targets.append(kv_target(
                                    t["id"].removesuffix(SUFFIX) + "-floor" + SUFFIX, "kv",
                                    f"{label}, against {what}{WHERE}", "ops/s", "ops_per_sec", xs, fs, xcmd,
                                    floor_cmd("bench-out/tcp_pingpong", "client" if LINK else None), fname, None))
                                print(f"  {what}: {statistics.median(f['ops_per_sec'] for f in fs):.0f} ops/s",
                                      flush=True)
                            print(f"{transport} {op} {size} c={conc}: xfer {row['xfer_ops_per_sec']:.0f} ops/s "
                                  f"redis {row['redis_ops_per_sec']:.0f} ops/s ratio "
                                  f"{row['xfer_ops_per_sec'] / row['redis_ops_per_sec']:.2f}", flush=True)
        if args.tail_procs > 0:
            tail_pass(args, binaries, targets)
    finally:
        redis.terminate()
        redis.wait(timeout=20)
    results.write(args.out, "kv", targets, args.rounds, args.xfer, args.xfer_b,
                  extra={"xfer_gomaxprocs": procs, "requests": args.requests, "scale": args.scale,
                         **link_info(LINK)})
    print()
    print("| transport | op | value | clients | xfer ops/s | xfer GB/s | xfer p50/p99/p99.9 µs | Redis ops/s | Redis GB/s | Redis p50/p99/p99.9 µs | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        size = "4 KiB" if r["size"] == 4096 else "1 MiB"
        op = r["op"].upper() + (" (SET)" if r["op"] == "put" else "")
        print(f"| {r['transport']} | {op} | {size} | {r['conc']} | {r['xfer_ops_per_sec']:.0f} | "
              f"{r['xfer_bytes_per_sec'] / 1e9:.3f} | {lat(r, 'xfer')} | "
              f"{r['redis_ops_per_sec']:.0f} | {r['redis_bytes_per_sec'] / 1e9:.3f} | {lat(r, 'redis')} | "
              f"{r['xfer_ops_per_sec'] / r['redis_ops_per_sec']:.2f} |")


if __name__ == "__main__":
    main()
