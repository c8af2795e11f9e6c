#!/usr/bin/env python3
"""Page fetch (`xfer pages bench`) against its peers (docs/BENCHMARKS.md, "Page fetch").

For each transport, ROUNDS interleaved rounds (order reversed in even rounds)
against one `xfer pages serve --size 64MiB` started by this script:
  xfer pages bench --transport T --duration D --json             (one page at a time)
  xfer bench --transport T --op read --size 4KiB --depth 1 ...   (the engine's 4 KiB READ)
  xfer pages bench --transport T --depth 32 --pages 32 ...       (32 fetches in flight, among 32 pages)
  xfer bench --transport T --op read --size 4KiB --depth 32 ...
  xfer pages bench --transport T --depth 32 ...                  (the same among 64 MiB: shown, no goal)
and over rdma (in the VM: tools/bench/pages.sh --transports rdma) also
  ib_read_lat -d DEV -x 1 -s 4096 -n 20000                       (perftest, same device)
Targets, medians of the rounds:
  pages-T-4k-p50, -p99:  a page fetch's latency; tcp p50 < 30 µs, p99 < 100 µs,
      shm p50 < 5 µs; rdma p50 ≤ 1.2× and p99 ≤ 1.5× ib_read_lat's typical
      and 99th percentile (with xfer bench READ as the peer on tcp and shm)
  pages-T-4k-depth32:    pages/s at depth 32 ≥ 0.9× xfer bench READ 4 KiB ops/s, both
      reading 128 KiB (xfer bench's 32 workers each read their own 4 KiB slot)
The results file (tools/bench/results.py) goes to bench-out/pages.json
(pages-rdma.json for rdma), or to --out.

Usage: tools/bench/pages.py [--rounds N] [--transports tcp,shm|rdma] [--duration 2] [--xfer PATH] [--out FILE]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BANNER = "xfer pages serve: listening on "


def fail(msg):
    sys.exit(f"pages.py: {msg}")


def run_json(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{shlex.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][0])


def serve(xfer, host, transport):
    # --stamp writes every page: pages never written read as the kernel's shared
    # zero page, which a fetch would copy from the CPU's cache.
    cmd = [xfer, "pages", "serve", "--listen", f"{host}:0", "--size", "64MiB", "--transport", transport, "--stamp"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith(BANNER):
        p.kill()
        fail(f"{shlex.join(cmd)}: printed {line!r}: {p.stderr.read()[-500:]}")
    return p, line[len(BANNER):].strip()


def ib_read_lat(dev, host):
    """ib_read_lat's typical, 99th and 99.9th percentile latency in µs (server and client here)."""
    args = ["-d", dev, "-x", "1", "-s", "4096", "-n", "20000"]
    if dev.startswith("siw"):
        args.append("-R")
    srv = subprocess.Popen(["ib_read_lat"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1)
    cli = subprocess.run(["ib_read_lat"] + args + [host], capture_output=True, text=True, timeout=120)
    srv.wait(timeout=60)
    lines = cli.stdout.splitlines()
    for i, line in enumerate(lines):
        if "t_typical" in line:
            for nxt in lines[i + 1:]:
                tok = nxt.split()
                if tok and re.fullmatch(r"\d+", tok[0]):
                    return float(tok[4]), float(tok[7]), float(tok[8])
    fail(f"ib_read_lat: no result: {cli.stdout[-500:]} {cli.stderr[-300:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per pages bench run (default 2)")
    ap.add_argument("--host", default="10.0.0.1" if os.environ.get("RDMA_VM") == "1" else "127.0.0.1")
    ap.add_argument("--device", default=os.environ.get("XFER_DEVICE", "rxe0"), help="rdma: the device (default rxe0)")
    ap.add_argument("--xfer", default=os.path.join(ROOT, "xfer"))
    ap.add_argument("--out")
    args = ap.parse_args()
    transports = args.transports.split(",")
    rdma = all(t == "rdma" for t in transports)
    if args.out is None:
        args.out = results.default_path("pages-rdma" if rdma else "pages")
    dur = f"{args.duration:g}s"
    targets = []
    for t in transports:
        srv, addr = serve(args.xfer, args.host, t)
        try:
            pb1 = ["pages", "bench", "--peer", addr, "--transport", t, "--duration", dur, "--json"]
            # At depth 32, the pages among the first 32: the 128 KiB that
            # xfer bench's 32 READs read too (each its own 4 KiB slot), so
            # that both copy from the same working set; and, shown, the
            # whole 64 MiB (cold pages: on shm a memory-bound copy).
            pb32 = pb1[:-1] + ["--depth", "32", "--pages", "32", "--json"]
            pb32all = pb1[:-1] + ["--depth", "32", "--json"]
            rb1 = ["bench", "--transport", t, "--op", "read", "--size", "4KiB", "--depth", "1", "--iters", "5000", "--json"]
            rb32 = ["bench", "--transport", t, "--op", "read", "--size", "4KiB", "--depth", "32", "--duration", dur, "--json"]
            m = {k: [] for k in ("p50", "p99", "pps", "ppsall", "r50", "r99", "rops", "ib50", "ib99")}
            # Each round's p50, p99 and p99.9 of the page fetch and of its peer.
            lat = {"page": [], "peer": []}
            for r in range(args.rounds):
                steps = ["p1", "r1", "p32", "r32", "p32all"] + (["ib"] if t == "rdma" else [])
                for s in (steps if r % 2 == 0 else steps[::-1]):
                    if s == "p1":
                        j = run_json([args.xfer] + pb1)
                        m["p50"].append(j["p50_us"]); m["p99"].append(j["p99_us"])
                        lat["page"].append({"p50_us": j["p50_us"], "p99_us": j["p99_us"], "p999_us": j.get("p999_us")})
                    elif s == "r1":
                        j = run_json([args.xfer] + rb1)
                        m["r50"].append(j["lat_p50_ns"] / 1e3); m["r99"].append(j["lat_p99_ns"] / 1e3)
                        if t != "rdma":
                            lat["peer"].append({"p50_us": j["lat_p50_ns"] / 1e3, "p99_us": j["lat_p99_ns"] / 1e3,
                                                "p999_us": j["lat_p999_ns"] / 1e3 if "lat_p999_ns" in j else None})
                    elif s == "p32":
                        m["pps"].append(run_json([args.xfer] + pb32)["pages_per_sec"])
                    elif s == "p32all":
                        m["ppsall"].append(run_json([args.xfer] + pb32all)["pages_per_sec"])
                    elif s == "r32":
                        j = run_json([args.xfer] + rb32)
                        m["rops"].append(j["bytes_per_sec"] / 4096)
                    else:
                        a, b, c = ib_read_lat(args.device, args.host)
                        m["ib50"].append(a); m["ib99"].append(b)
                        lat["peer"].append({"p50_us": a, "p99_us": b, "p999_us": c})
                print(f"{t} round {r + 1}: page p50 {m['p50'][-1]:.1f} p99 {m['p99'][-1]:.1f} µs, "
                      f"READ p50 {m['r50'][-1]:.1f} p99 {m['r99'][-1]:.1f} µs"
                      + (f", ib_read_lat {m['ib50'][-1]:.1f} / {m['ib99'][-1]:.1f} µs" if t == "rdma" else "")
                      + f"; depth 32: {m['pps'][-1]:.0f} pages/s ({m['ppsall'][-1]:.0f} over 64 MiB), READ {m['rops'][-1]:.0f} ops/s", flush=True)
        finally:
            srv.terminate()
            srv.wait(timeout=30)
        group = "pages-rdma" if t == "rdma" else "pages"
        c1, c32 = "xfer " + shlex.join(pb1).replace(addr, "ADDR"), "xfer " + shlex.join(pb32).replace(addr, "ADDR")
        if t == "rdma":
            ibcmd = f"ib_read_lat -d {args.device} -x 1 -s 4096 -n 20000"
            peer50 = results.series(m["ib50"], ibcmd, "ib_read_lat t_typical")
            peer99 = results.series(m["ib99"], ibcmd, "ib_read_lat 99%")
            g50, g99 = results.goal("<= 1.2"), results.goal("<= 1.5")
        else:
            peer50 = results.series(m["r50"], "xfer " + shlex.join(rb1), "xfer bench READ 4 KiB p50")
            peer99 = results.series(m["r99"], "xfer " + shlex.join(rb1), "xfer bench READ 4 KiB p99")
            g50 = results.goal("< 30", "xfer") if t == "tcp" else results.goal("< 5", "xfer")
            g99 = results.goal("< 100", "xfer") if t == "tcp" else None
        targets.append(results.target(f"pages-{t}-4k-p50", group, f"{t} 4 KiB page fetch p50, one at a time", "us",
                                      results.series(m["p50"], c1), peer50, g50))
        targets.append(results.target(f"pages-{t}-4k-p99", group, f"{t} 4 KiB page fetch p99, one at a time", "us",
                                      results.series(m["p99"], c1), peer99, g99))
        peer_lat = (results.series([], ibcmd, "ib_read_lat (t_typical, 99%, 99.9%)", results.latency(lat["peer"]))
                    if t == "rdma" else
                    results.series([], "xfer " + shlex.join(rb1), "xfer bench READ 4 KiB", results.latency(lat["peer"])))
        targets.append(results.latency_target(f"pages-{t}-4k", group, f"{t} 4 KiB page fetch, one at a time",
                                              results.series([], c1, latency=results.latency(lat["page"])), peer_lat))
        rops = results.series(m["rops"], "xfer " + shlex.join(rb32), "xfer bench READ 4 KiB, depth 32")
        c32all = "xfer " + shlex.join(pb32all).replace(addr, "ADDR")
        targets.append(results.target(f"pages-{t}-4k-depth32", group, f"{t} 4 KiB page fetches, 32 in flight, among 32 pages",
                                      "ops/s", results.series(m["pps"], c32), rops, results.goal(">= 0.9")))
        targets.append(results.target(f"pages-{t}-4k-depth32-64m", group, f"{t} 4 KiB page fetches, 32 in flight, among 64 MiB",
                                      "ops/s", results.series(m["ppsall"], c32all), rops, None))
        med = lambda k: statistics.median(m[k])
        print(f"{t}: page p50 {med('p50'):.1f} µs, p99 {med('p99'):.1f} µs; READ p50 {med('r50'):.1f}, p99 {med('r99'):.1f}"
              + (f"; ib_read_lat {med('ib50'):.1f} / {med('ib99'):.1f}" if t == "rdma" else "")
              + f"; depth 32 {med('pps'):.0f} pages/s against {med('rops'):.0f} READs/s ({med('pps') / med('rops'):.2f}),"
              + f" over 64 MiB {med('ppsall'):.0f} ({med('ppsall') / med('rops'):.2f})")
    results.write(args.out, "pages", targets, args.rounds, args.xfer, extra={"duration_s": args.duration})


if __name__ == "__main__":
    main()
