#!/usr/bin/env python3
"""Interleaved peer comparisons of the tcp and shm transports (docs/BENCHMARKS.md).

Runs each peer (iperf3, qperf, a single-thread C memcpy, and the loopback
ceiling of tools/bench/tcp_stream.c) and the matching
`xfer bench` in turn, ROUNDS times (peer, xfer, peer, xfer, ...), on this
machine, unpinned on both sides, and prints the medians and ratios as a
Markdown table. The results file (tools/bench/results.py) goes to
bench-out/peers.json, or to --out.

With --xfer-b, every round also runs the second binary right after the
first, in alternating order (peer, A, B; then peer, B, A; ...), so that
tools/bench/ab.sh can compare two builds against the same peer runs.
--secret-file-b FILE runs B's benches with the shared secret in FILE (A
without): with the same binary as A and B, what authentication costs.

Usage: tools/bench/peers.py [--rounds N] [--seconds S] [--xfer PATH] [--xfer-b PATH] [--secret-file-b FILE] [--out FILE]
                           [--netns [--netem-delay D]]
Needs: iperf3, qperf, gcc (make bench-peers installs them with apt).
Only loopback addresses are used, but with --netns (below).

xfer gives connections between two sockets of one host reno (tcp.congestion:
auto), where the system's default may be a paced algorithm (BBR). The tcp
targets compare against iperf3 as it runs by default; the -same-cc rows
against iperf3 -C reno in the same rounds; the loopback ceiling runs reno.

The 64 B round trip and the 4 KiB READ also give latency targets (the
latency table of docs/BENCHMARKS.md): xfer's p50, p99 and p99.9, and for
the round trip sockperf's ping-pong over tcp (--full-rtt: whole round
trips) beside them; so sockperf is needed too (peers.sh installs it).

--netns runs every tcp row across two network namespaces joined by a veth
pair (tools/bench/netns.py; needs root): iperf3 -s, qperf, sockperf sr and
an `xfer serve --listen 10.77.0.1:19305 --transport tcp` for each xfer run
in one, the clients (xfer bench --peer 10.77.0.1:19305) in the other, with
the system's congestion control at both ends, as between two hosts. Their
ids end in -netns (-netns-50us with --netem-delay 50us), beside the
loopback rows. The ceiling rows set tcp_stream.c's two ends in the two
namespaces (the ceiling of one stream over the link, with the system's
algorithm). The shm rows and the -same-cc rows (iperf3 runs the system's
algorithm, as xfer does there) are left out.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

import netns
import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# With --netns: the link, whose namespaces the servers and the clients run
# in; HOST is the servers' address.
LINK = None
HOST = "127.0.0.1"
XFER_SERVE_PORT = 19305  # xfer serve's, in netns mode


def server(cmd):
    """cmd, run where the servers run."""
    return LINK.server(cmd) if LINK else cmd


def client(cmd):
    """cmd, run where the clients run."""
    return LINK.client(cmd) if LINK else cmd


def run(cmd, timeout=120, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True, **kw).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"peers.py: {' '.join(cmd)}: exit {e.returncode}: {e.stderr.strip()[-500:]}")


def xfer_args(transport, op, size, depth, seconds):
    peer = ["--peer", f"{HOST}:{XFER_SERVE_PORT}"] if LINK else []
    return ["bench", *peer, "--transport", transport, "--op", op, "--size", str(size),
            "--depth", str(depth), "--duration", f"{seconds}s", "--json"]


def xfer_bench(xfer, args, serve_extra=()):
    """One xfer bench run: its JSON line. On loopback it starts its own target;
    in netns mode an xfer serve in the server's namespace is its --peer."""
    if not LINK:
        return xfer_parse(xfer, args, run([xfer] + args))
    srv = subprocess.Popen(server(xfer_serve_args(xfer, serve_extra)), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        if not srv.stdout.readline().startswith("xfer serve: listening on"):
            srv.wait(timeout=20)
            sys.exit(f"peers.py: {shlex.join(xfer_serve_args(xfer, serve_extra))} exited ({srv.returncode}) "
                     "before it listened")
        return xfer_parse(xfer, args, run(client([xfer] + args)))
    finally:
        srv.terminate()
        srv.wait(timeout=20)


def xfer_serve_args(xfer, extra=()):
    # 64 MiB: the region xfer bench's own target gets for every size here
    # (2 x depth x size, at least 64 MiB).
    return [xfer, "serve", "--listen", f"{HOST}:{XFER_SERVE_PORT}", "--transport", "tcp", "--memory-mb", "64",
            *extra]


def xfer_parse(xfer, args, out):
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if len(rows) != 1 or rows[0].get("transport") != args[args.index("--transport") + 1]:
        sys.exit(f"peers.py: {xfer} {' '.join(args)}: expected one JSON line over "
                 f"{args[args.index('--transport') + 1]}, got:\n{out}")
    return rows[0]


# The congestion control xfer gives connections between two sockets of one
# host (transport.SameHostCongestion): the same-CC peers run with it.
SAME_HOST_CC = "reno"


def iperf3_cmd(port, seconds, cc=None):
    return ["iperf3", "-c", HOST, "-p", str(port), "-t", str(seconds), "-J"] + (["-C", cc] if cc else [])


def iperf3(seconds, port=19301, cc=None):
    srv = subprocess.Popen(server(["iperf3", "-s", "-1", "-p", str(port)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        d = json.loads(run(client(iperf3_cmd(port, seconds, cc))))
        return d["end"]["sum_received"]["bits_per_second"] / 8
    finally:
        srv.wait(timeout=10)


def tcp_stream_cmd(binary, port, role=None):
    """tcp_stream.c's command line: on loopback, both ends with reno; in netns
    mode, the role's end (recv, send) at HOST with the system's algorithm."""
    if role:
        return [binary, "48", str(port), "system", role, HOST]
    return [binary, "48", str(port), SAME_HOST_CC]


def tcp_stream(binary, port=19304):
    """The ceiling: tcp_stream.c's GB/s (one stream of 1 MiB frames with
    48-byte headers, read as xfer reads them), in B/s; over the link in netns
    mode, its reader in the server's namespace."""
    if LINK:
        srv = subprocess.Popen(server(tcp_stream_cmd(binary, port, "recv")), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            if srv.stdout.readline().strip() != "listening":
                sys.exit(f"peers.py: {shlex.join(tcp_stream_cmd(binary, port, 'recv'))}: {srv.stderr.read()[-300:]}")
            run(client(tcp_stream_cmd(binary, port, "send")))
            out, _ = srv.communicate(timeout=120)
        finally:
            srv.kill()
            srv.wait()
    else:
        out = run(tcp_stream_cmd(binary, port))
    m = re.search(r"([0-9.]+) GB/s", out)
    if not m:
        sys.exit(f"peers.py: tcp_stream printed no rate: {out.strip()[-200:]}")
    return float(m.group(1)) * 1e9


def qperf_cmd(port, seconds):
    return ["qperf", HOST, "-lp", str(port), "-t", str(seconds), "-m", "64", "tcp_lat"]


def qperf_rtt_us(seconds, port=19302):
    srv = subprocess.Popen(server(["qperf", "-lp", str(port)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = run(client(qperf_cmd(port, seconds)))
        m = re.search(r"latency\s*=\s*([\d.]+)\s*(ns|us|ms)", out)
        if not m:
            sys.exit(f"peers.py: no latency in qperf's output:\n{out}")
        v = float(m.group(1)) * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[m.group(2)]
        return 2 * v  # qperf reports one way: RTT/2
    finally:
        srv.kill()
        srv.wait()


def sockperf_cmd(port, seconds):
    return ["sockperf", "pp", "--tcp", "-i", HOST, "-p", str(port), "-m", "64", "-t", str(seconds), "--full-rtt"]


def parse_sockperf(out):
    """p50, p99 and p99.9 (µs) of sockperf ping-pong's percentile lines; ValueError when one is missing."""
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    got = {float(m.group(1)): float(m.group(2))
           for m in re.finditer(r"---> percentile\s+([\d.]+)\s*=\s*([\d.]+)", out)}
    want = {"p50_us": 50.0, "p99_us": 99.0, "p999_us": 99.9}
    missing = [k for k, q in want.items() if q not in got]
    if missing:
        raise ValueError(f"sockperf: no {', '.join(missing)} in its output")
    return {k: got[q] for k, q in want.items()}


def sockperf_rtt(seconds, port=19303):
    """One sockperf ping-pong run: whole round trips' p50, p99 and p99.9 in µs."""
    srv = subprocess.Popen(server(["sockperf", "sr", "--tcp", "-i", HOST, "-p", str(port)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = run(client(sockperf_cmd(port, seconds)))
        try:
            return parse_sockperf(out)
        except ValueError as e:
            sys.exit(f"peers.py: {e}:\n{out[-1500:]}")
    finally:
        srv.kill()
        srv.wait()


def link_info(link):
    """The results file's record of where the run's two ends were."""
    if not link:
        return {"link": "loopback"}
    return {"link": "netns", "link_detail": link.describe(), "netem_delay": link.delay,
            "congestion": link.congestion}


def lat_of(x):
    """xfer bench's percentiles (one JSON line) in µs."""
    return {"p50_us": x["lat_p50_ns"] / 1e3, "p99_us": x["lat_p99_ns"] / 1e3,
            "p999_us": x["lat_p999_ns"] / 1e3 if "lat_p999_ns" in x else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0,
                    help="duration of every run (default: 3 s for tcp and its peers, 2 s for shm and memcpy)")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"), help="the xfer binary (default: ./xfer)")
    ap.add_argument("--xfer-b", help="a second xfer binary, run interleaved with the first (A/B)")
    ap.add_argument("--secret-file-b", help="B's benches run with this secret file (A without)")
    ap.add_argument("--out", help="the results file (default: bench-out/peers.json; bench-out/peers-netns.json "
                                   "with --netns)")
    ap.add_argument("--netns", action="store_true",
                    help="run the tcp rows across two network namespaces joined by a veth pair (needs root); "
                         "the shm rows are skipped")
    ap.add_argument("--netem-delay", metavar="D",
                    help="with --netns: a netem delay on each end's egress, e.g. 50us (a round trip grows by 2 D)")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.seconds and a.seconds < 1:
        ap.error("--seconds must be at least 1 (iperf3 -t 0 runs until it is stopped)")
    if a.secret_file_b and not a.xfer_b:
        ap.error("--secret-file-b needs --xfer-b (it may be the same binary as --xfer)")
    if a.secret_file_b and not os.access(a.secret_file_b, os.R_OK):
        ap.error(f"--secret-file-b {a.secret_file_b} is not a readable file (make one with: xfer secret > FILE)")
    for x in filter(None, (a.xfer, a.xfer_b)):
        if not os.access(x, os.X_OK):
            ap.error(f"xfer binary {x} is not an executable file (make build, or go build -o xfer ./cmd/xfer)")
    if a.out is None:
        a.out = results.default_path("peers-netns" if a.netns else "peers")
    netns.check_delay_arg(ap, a.netns, a.netem_delay)
    if not a.netns:
        measure(a)
        return
    global LINK, HOST
    try:
        with netns.Link(a.netem_delay) as link:
            LINK, HOST = link, link.server_addr
            print(f"netns: {link.describe()}", flush=True)
            print("netns: the shm rows are skipped (shm joins two processes of one host, not two hosts), and so "
                  "are the -same-cc rows (iperf3 runs the system's congestion control, as xfer does here); the "
                  "ceiling rows measure one tcp_stream.c stream over the link", flush=True)
            measure(a, link)
    except netns.Error as e:
        sys.exit(f"peers.py: {e}")


def measure(a, link=None):
    """The rounds, the results file and the summary; across link's namespaces when given."""
    loop = link is None
    sfx = "" if loop else netns.suffix(link.delay)
    where = "" if loop else (", two namespaces over a veth"
                             + (f", netem {link.delay} each way" if link.delay else ""))
    fmt = lambda s: f"{s:g}"
    t_tcp = fmt(a.seconds or 3)
    t_shm = fmt(a.seconds or 2)
    os.makedirs(os.path.join(ROOT, "bench-out"), exist_ok=True)
    memcpy = os.path.join(ROOT, "bench-out", "memcpy")
    stream = os.path.join(ROOT, "bench-out", "tcp_stream")
    if loop:
        subprocess.run(["gcc", "-O2", "-o", memcpy, os.path.join(HERE, "memcpy.c")], check=True)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", stream, os.path.join(HERE, "tcp_stream.c")], check=True)

    binaries = {"a": a.xfer}
    if a.xfer_b:
        binaries["b"] = a.xfer_b
    series = {}  # key -> list of values; xfer keys are "a:NAME" and "b:NAME"
    commands = {}

    def add(key, v):
        series.setdefault(key, []).append(v)

    def xfer(r, name, args, pick):
        """Runs every binary once, in alternating order from round to round."""
        commands[name] = "xfer " + " ".join(args)
        order = list(binaries.items())
        if r % 2 == 1:
            order.reverse()
        for which, path in order:
            extra = ["--secret-file", a.secret_file_b] if which == "b" and a.secret_file_b else []
            add(f"{which}:{name}", pick(xfer_bench(path, args + extra, serve_extra=extra)))

    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
        add("iperf3", iperf3(t_tcp))
        if loop:
            add("iperf3_cc", iperf3(t_tcp, cc=SAME_HOST_CC))
        xfer(r, "tcp_write_1m", xfer_args("tcp", "write", "1MiB", 4, t_tcp), lambda x: x["bytes_per_sec"])
        add("iperf3", iperf3(t_tcp))
        xfer(r, "tcp_read_1m", xfer_args("tcp", "read", "1MiB", 4, t_tcp), lambda x: x["bytes_per_sec"])
        add("tcp_stream", tcp_stream(stream))
        add("qperf_rtt", qperf_rtt_us(t_tcp))
        add("sockperf", sockperf_rtt(t_tcp))
        xfer(r, "tcp_write_64", xfer_args("tcp", "write", 64, 1, t_tcp), lat_of)
        for size, name in ((1 << 20, "1m"), (16 << 20, "16m")) if loop else ():
            for op in ("write", "read"):
                add(f"memcpy_{name}", float(run([memcpy, str(size), t_shm]).strip()))
                xfer(r, f"shm_{op}_{name}", xfer_args("shm", op, size, 1, t_shm), lambda x: x["bytes_per_sec"])
        xfer(r, "tcp_read_4k", xfer_args("tcp", "read", "4KiB", 1, t_tcp), lat_of)
    # The 64 B round trip and the 4 KiB READ give targets of their p50 (and
    # p99) and, with all three percentiles, a latency target each.
    lats = {"sockperf": series.pop("sockperf")}
    for w in binaries:
        for name in ("tcp_write_64", "tcp_read_4k"):
            v = lats[f"{w}:{name}"] = series.pop(f"{w}:{name}")
            series[f"{w}:{name}_p50"] = [x["p50_us"] for x in v]
            series[f"{w}:{name}_p99"] = [x["p99_us"] for x in v]
    for name in ("tcp_write_64", "tcp_read_4k"):
        commands[f"{name}_p50"] = commands[f"{name}_p99"] = commands.pop(name)

    peers = {
        "iperf3": results.series(series["iperf3"], " ".join(iperf3_cmd(19301, t_tcp)), "iperf3, one stream"),
        "qperf_rtt": results.series(series["qperf_rtt"], " ".join(qperf_cmd(19302, t_tcp)), "qperf tcp_lat × 2"),
    }
    if loop:
        peers["iperf3_cc"] = results.series(series["iperf3_cc"], " ".join(iperf3_cmd(19301, t_tcp, SAME_HOST_CC)),
                                            f"iperf3, one stream, {SAME_HOST_CC}")
        peers["tcp_stream"] = results.series(series["tcp_stream"],
                                             " ".join(tcp_stream_cmd("bench-out/tcp_stream", 19304)),
                                             f"loopback ceiling (tcp_stream.c, {SAME_HOST_CC})")
    else:
        peers["tcp_stream"] = results.series(
            series["tcp_stream"], " ".join(tcp_stream_cmd("bench-out/tcp_stream", 19304, "recv")) + " & "
            + " ".join(tcp_stream_cmd("bench-out/tcp_stream", 19304, "send")),
            f"link ceiling (tcp_stream.c, {link.congestion})")
    for name in ("1m", "16m") if loop else ():
        size = 1 << 20 if name == "1m" else 16 << 20
        peers[f"memcpy_{name}"] = results.series(series[f"memcpy_{name}"], f"bench-out/memcpy {size} {t_shm}",
                                                 "C memcpy, 1 thread")
    defs = [
        ("tcp-write-1m", "tcp WRITE 1 MiB, depth 4", "B/s", "tcp_write_1m", "iperf3", results.goal(">= 2.0")),
        ("tcp-read-1m", "tcp READ 1 MiB, depth 4", "B/s", "tcp_read_1m", "iperf3", results.goal(">= 2.0")),
        # iperf3 with the congestion control xfer's same-host connections
        # run (the system's default may be paced, BBR): shown beside the
        # goal, not judged.
        ("tcp-write-1m-same-cc", f"tcp WRITE 1 MiB, depth 4, against iperf3 with {SAME_HOST_CC}", "B/s", "tcp_write_1m",
         "iperf3_cc", None),
        ("tcp-read-1m-same-cc", f"tcp READ 1 MiB, depth 4, against iperf3 with {SAME_HOST_CC}", "B/s", "tcp_read_1m",
         "iperf3_cc", None),
        # What one loopback stream carries here at all, for a program that
        # does nothing else, with xfer's congestion control: shown beside
        # the goal, not judged.
        ("tcp-write-1m-ceiling", "tcp WRITE 1 MiB, depth 4, against the loopback ceiling", "B/s", "tcp_write_1m",
         "tcp_stream", None),
        ("tcp-read-1m-ceiling", "tcp READ 1 MiB, depth 4, against the loopback ceiling", "B/s", "tcp_read_1m",
         "tcp_stream", None),
        ("tcp-write-64-rtt-p50", "tcp WRITE 64 B round trip p50, depth 1", "us", "tcp_write_64_p50", "qperf_rtt",
         results.goal("<= 1.2")),
    ]
    for name, label in (("1m", "1 MiB"), ("16m", "16 MiB")):
        for op in ("write", "read"):
            defs.append((f"shm-{op}-{name}", f"shm {op.upper()} {label}, depth 1", "B/s", f"shm_{op}_{name}",
                         f"memcpy_{name}", results.goal(">= 0.8")))
    defs += [
        ("tcp-read-4k-p50", "tcp READ 4 KiB (page fetch) p50, depth 1", "us", "tcp_read_4k_p50", None,
         results.goal("< 30", on="xfer")),
        ("tcp-read-4k-p99", "tcp READ 4 KiB (page fetch) p99, depth 1", "us", "tcp_read_4k_p99", None,
         results.goal("< 100", on="xfer")),
    ]
    targets = []
    for id, label, unit, key, peer, g in defs:
        if f"a:{key}" not in series or (peer is not None and peer not in peers):
            continue  # not measured in netns mode: shm, and the loopback-only peers
        if link and link.delay and g and g["on"] == "xfer":
            g = None  # an absolute bound of a round trip does not hold with a delay added to it
        xb = results.series(series[f"b:{key}"]) if a.xfer_b else None
        if not loop:
            label = label.replace("the loopback ceiling", "the link's ceiling")
        targets.append(results.target(id + sfx, "tcp-shm", label + where, unit,
                                      results.series(series[f"a:{key}"], commands[key]), peers.get(peer), g, xfer_b=xb))
    targets.append(results.latency_target(
        "tcp-write-64-rtt" + sfx, "tcp-shm", "tcp WRITE 64 B round trip, depth 1" + where,
        results.series([], commands["tcp_write_64_p50"], latency=results.latency(lats["a:tcp_write_64"])),
        results.series([], " ".join(sockperf_cmd(19303, t_tcp)), "sockperf ping-pong, whole round trips",
                       latency=results.latency(lats["sockperf"]))))
    targets.append(results.latency_target(
        "tcp-read-4k" + sfx, "tcp-shm", "tcp READ 4 KiB (page fetch), depth 1" + where,
        results.series([], commands["tcp_read_4k_p50"], latency=results.latency(lats["a:tcp_read_4k"]))))
    results.write(a.out, "peers", targets, a.rounds, a.xfer, a.xfer_b, extra=link_info(link))

    def show(unit, v):
        return f"{v / 1e9:.2f} GB/s" if unit == "B/s" else f"{v:.1f} µs"

    print(f"Medians of {a.rounds} interleaved rounds.\n")
    print("| target | xfer | peer | peer figure | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for t in targets:
        p = t["peer"]
        print(f"| {t['name']} | {show(t['unit'], t['xfer']['median'])} | {p['name'] if p else '(absolute)'} | "
              f"{show(t['unit'], p['median']) if p else ''} | {'' if t['ratio'] is None else '%.2f' % t['ratio']} | "
              f"{results.goal_text(t['goal'], t['unit'])} | {'' if t['met'] is None else 'yes' if t['met'] else '**no**'} |")
    print("\nLatencies (µs), medians of the rounds' p50 / p99 / p99.9:\n")
    for t in targets:
        if t.get("table") == "latency":
            f = lambda s: " / ".join("-" if s["latency"][k] is None else f"{s['latency'][k]:.1f}"
                                     for k in results.LATENCY_KEYS) if s else "-"
            print(f"- {t['name']}: xfer {f(t['xfer'])}; {t['peer']['name'] if t['peer'] else 'no peer'} {f(t['peer'])}")
    print("\nPer-round values:\n")
    for k, v in series.items():
        print(f"- {k}: " + ", ".join(f"{x:.4g}" for x in v))


if __name__ == "__main__":
    main()
