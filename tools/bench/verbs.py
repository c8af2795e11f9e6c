#!/usr/bin/env python3
"""Summarises a tools/bench/verbs.sh run (xfer rdma against perftest on rxe0 or siw0).

Reads the raw outputs in DIR (default bench-out/verbs), checks that every
xfer line says transport "rdma", and prints the medians of the interleaved
rounds, the ratios against perftest and the per-round values as Markdown.

Units: perftest prints "MB/sec", which is MiB/s (its --help: "instead of
MiB/sec"); everything here is converted to MB/s = 10^6 bytes/s.
ib_write_lat's t_typical is the median of (interval between successive
ping-pong iterations) / 2, i.e. half a round trip; xfer's lat_p50_ns is a
whole WRITE round trip (post to completion), so it is compared with
2 × t_typical.

The results file (tools/bench/results.py) goes to --out (default
bench-out/verbs.json). With xfer runs of a second binary in DIR/b (verbs.sh
--xfer-b), each target also gets that binary's series ("xfer_b").

Usage: tools/bench/verbs.py [DIR] [--device rxe0] [--out FILE] [--command CMD]
                            [--xfer PATH] [--xfer-b PATH]
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

import results

MIB = 1 << 20


# Run variants: the defaults, the event channel, pollers that never sleep.
VARIANTS = ("", "events-", "always-")
LABELS = {"": "", "events-": " (event channel)", "always-": " (pollers never sleep)"}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def perftest_row(text, header_key):
    """Tokens of the data line after the header line containing header_key."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if header_key in line:
            for nxt in lines[i + 1:]:
                tok = nxt.split()
                if tok and re.fullmatch(r"\d+", tok[0]):
                    return tok
    return None


def xfer_row(text, errors, name):
    rows = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
    if len(rows) != 1:
        errors.append(f"{name}: {len(rows)} JSON lines")
        return None
    if rows[0].get("transport") != "rdma":
        errors.append(f"{name}: transport {rows[0].get('transport')!r}, not rdma")
        return None
    return rows[0]


def parse(d, errors, notes, xfer_only=False):
    """The per-round series of one directory of raw outputs: key -> {round: value}."""
    series = {}

    def add(key, r, v):
        series.setdefault(key, {})[r] = v

    for path in sorted(glob.glob(os.path.join(d, "*r*-*"))):
        base = os.path.basename(path)
        if "." in base:
            continue
        # rN-NAME; variant runs are rN-events-xfer_... and rN-always-xfer_...
        m = re.fullmatch(r"r(\d+)-(.*)", base)
        if not m:
            continue
        r, name = int(m.group(1)), m.group(2)
        if xfer_only and "xfer_" not in name:
            continue
        text = read(path)
        rc = read(path + ".rc").strip()
        if rc not in ("", "0"):
            errors.append(f"round {r} {name}: exit {rc}")
        if name.startswith("ib_") and name.endswith("_bw"):
            tok = perftest_row(text, "BW average")
            if not tok:
                errors.append(f"round {r} {name}: no result line")
                continue
            iters, avg = int(tok[1]), float(tok[3])
            add(name, r, avg * MIB)
            # perftest times with the TSC; under TCG check it against the
            # iteration count over the 2 s duration.
            est = iters * 65536 / 2 / MIB
            if abs(est - avg) > 0.25 * avg:
                notes.append(f"round {r} {name}: {avg:.1f} MiB/s reported, iterations/2 s give {est:.1f}")
        elif name in ("ib_write_lat", "ib_read_lat"):
            tok = perftest_row(text, "t_typical")
            if not tok:
                errors.append(f"round {r} {name}: no result line")
                continue
            add(f"{name}_typical_us", r, float(tok[4]))
            add(f"{name}_p99_us", r, float(tok[7]))
            if len(tok) > 8:
                add(f"{name}_p999_us", r, float(tok[8]))
        elif "xfer_" in name:
            row = xfer_row(text, errors, f"round {r} {name}")
            if not row:
                continue
            variant = next((v for v in VARIANTS if v and name.startswith(v)), "")
            key = name.removeprefix(variant)
            if key.startswith(("xfer_write_8", "xfer_read_8")):
                op = "write" if key.startswith("xfer_write") else "read"
                add(f"{variant}xfer_{op}_8_p50_us", r, row["lat_p50_ns"] / 1e3)
                add(f"{variant}xfer_{op}_8_p99_us", r, row["lat_p99_ns"] / 1e3)
                if "lat_p999_ns" in row:
                    add(f"{variant}xfer_{op}_8_p999_us", r, row["lat_p999_ns"] / 1e3)
            else:
                add(name, r, row["bytes_per_sec"])
        for w in re.findall(r"^.*(?:[Ww]arning|Conflicting).*$", text + read(path + ".srv"), re.M):
            notes.append(f"round {r} {name}: {w.strip()}")
    return series


ENV = {"": "", "events-": "XFER_RDMA_USE_EVENT_CHANNEL=true ", "always-": "XFER_RDMA_POLL_IDLE=-1ns "}
SUFFIX = {"": "", "events-": "-events", "always-": "-always"}


def targets_of(series, series_b, dev, has_b):
    """The results file's targets, from the medians of the series."""
    vals = lambda k, s=series: [s[k][r] for r in sorted(s[k])] if k in s else []
    cm = " -R" if dev.startswith("siw") else ""
    out = []
    for op in ("write", "read"):
        peer = f"ib_{op}_bw"
        pser = results.series(vals(peer), f"{peer} -d {dev} -x 1 -s 65536 -D 2{cm}", f"{peer} -s 65536 -D 2")
        for variant in VARIANTS:
            keys = sorted((k for k in series if k.startswith(f"{variant}xfer_{op}_64k_d")),
                          key=lambda k: int(k.rsplit("_d", 1)[1]))
            for k in keys:
                depth = k.rsplit("_d", 1)[1]
                cmd = (f"{ENV[variant]}xfer bench --transport rdma --op {op} --size 64KiB --duration 2s "
                       f"--depth {depth} --json")
                out.append(results.target(
                    f"rdma-{dev[:3]}-{op}-64k-d{depth}{SUFFIX[variant]}", f"rdma-{dev[:3]}",
                    f"rdma WRITE 64 KiB, depth {depth}{LABELS[variant]}".replace("WRITE", op.upper()), "B/s",
                    results.series(vals(k), cmd), pser if pser["rounds"] else None, results.goal(">= 0.9"),
                    xfer_b=results.series(vals(k, series_b)) if has_b else None))
    lat = f"ib_write_lat -d {dev} -x 1 -s 8 -n 1000{cm}"
    p50 = [2 * v for v in vals("ib_write_lat_typical_us")]
    p99 = [2 * v for v in vals("ib_write_lat_p99_us")]
    p999 = [2 * v for v in vals("ib_write_lat_p999_us")]
    med = lambda l: statistics.median(l) if l else None
    for variant in VARIANTS:
        k = f"{variant}xfer_write_8_p50_us"
        if k not in series:
            continue
        cmd = f"{ENV[variant]}xfer bench --transport rdma --op write --size 8 --depth 1 --iters 2000 --json"
        # Pollers that never sleep are shown, not judged (docs/BENCHMARKS.md).
        g = results.goal("<= 1.2") if variant != "always-" else None
        out.append(results.target(
            f"rdma-{dev[:3]}-write-8-rtt-p50{SUFFIX[variant]}", f"rdma-{dev[:3]}",
            "rdma WRITE 8 B round trip p50, depth 1" + LABELS[variant], "us", results.series(vals(k), cmd),
            results.series(p50, lat, "ib_write_lat t_typical × 2") if p50 else None, g,
            xfer_b=results.series(vals(k, series_b)) if has_b else None))
        k = f"{variant}xfer_write_8_p99_us"
        out.append(results.target(
            f"rdma-{dev[:3]}-write-8-rtt-p99{SUFFIX[variant]}", f"rdma-{dev[:3]}",
            "rdma WRITE 8 B round trip p99, depth 1" + LABELS[variant], "us", results.series(vals(k), cmd),
            results.series(p99, lat, "ib_write_lat 99% × 2") if p99 else None, None,
            xfer_b=results.series(vals(k, series_b)) if has_b else None))
        # iWARP: the same round trips against perftest's 8 B READ, which
        # is what an xfer WRITE there waits for (no goal; siw only).
        rlat = f"ib_read_lat -d {dev} -s 8 -n 1000{cm}"
        for q, pk, plabel in (("p50", "typical", "t_typical"), ("p99", "p99", "99%")):
            rvals = vals(f"ib_read_lat_{pk}_us")
            if not rvals:
                continue
            out.append(results.target(
                f"rdma-{dev[:3]}-write-8-rtt-{q}-vs-read{SUFFIX[variant]}", f"rdma-{dev[:3]}",
                f"rdma WRITE 8 B round trip {q}, depth 1, against a READ" + LABELS[variant], "us",
                results.series(vals(f"{variant}xfer_write_8_{q}_us"), cmd),
                results.series(rvals, rlat, f"ib_read_lat -s 8 {plabel}"), None,
                xfer_b=results.series(vals(f"{variant}xfer_write_8_{q}_us", series_b)) if has_b else None))
        # xfer's own 8 B READ against perftest's (siw only).
        rcmd = f"{ENV[variant]}xfer bench --transport rdma --op read --size 8 --depth 1 --iters 2000 --json"
        for q, pk, plabel in (("p50", "typical", "t_typical"), ("p99", "p99", "99%")):
            rvals, xvals = vals(f"ib_read_lat_{pk}_us"), vals(f"{variant}xfer_read_8_{q}_us")
            if not rvals or not xvals:
                continue
            out.append(results.target(
                f"rdma-{dev[:3]}-read-8-rtt-{q}{SUFFIX[variant]}", f"rdma-{dev[:3]}",
                f"rdma READ 8 B round trip {q}, depth 1" + LABELS[variant], "us",
                results.series(xvals, rcmd), results.series(rvals, rlat, f"ib_read_lat -s 8 {plabel}"), None,
                xfer_b=results.series(vals(f"{variant}xfer_read_8_{q}_us", series_b)) if has_b else None))
        if vals(f"{variant}xfer_read_8_p50_us") and vals("ib_read_lat_typical_us"):
            out.append(results.latency_target(
                f"rdma-{dev[:3]}-read-8-rtt{SUFFIX[variant]}", f"rdma-{dev[:3]}",
                "rdma READ 8 B round trip, depth 1" + LABELS[variant],
                results.series([], rcmd, latency={q: med(vals(f"{variant}xfer_read_8_{q}")) for q in results.LATENCY_KEYS}),
                results.series([], rlat, "ib_read_lat -s 8 (t_typical, 99%, 99.9%)", latency={
                    "p50_us": med(vals("ib_read_lat_typical_us")), "p99_us": med(vals("ib_read_lat_p99_us")),
                    "p999_us": med(vals("ib_read_lat_p999_us"))})))
        # The latency table: the three percentiles of both, perftest's doubled.
        xlat = {q: med(vals(f"{variant}xfer_write_8_{q}")) for q in results.LATENCY_KEYS}
        plat = {"p50_us": med(p50), "p99_us": med(p99), "p999_us": med(p999)}
        out.append(results.latency_target(
            f"rdma-{dev[:3]}-write-8-rtt{SUFFIX[variant]}", f"rdma-{dev[:3]}",
            "rdma WRITE 8 B round trip, depth 1" + LABELS[variant], results.series([], cmd, latency=xlat),
            results.series([], lat, "ib_write_lat (t_typical, 99%, 99.9%) × 2", latency=plat) if p50 else None))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="bench-out/verbs", help="verbs.sh's raw outputs")
    ap.add_argument("--device", default="rxe0")
    ap.add_argument("--out", default=results.default_path("verbs"), help="the results file")
    ap.add_argument("--command", help="the invocation to record (default: this script's)")
    ap.add_argument("--xfer", help="the xfer binary that was measured")
    ap.add_argument("--xfer-b", help="the second binary, whose runs are in DIR/b")
    a = ap.parse_args()
    d = a.dir
    errors, notes = [], []
    series = parse(d, errors, notes)
    series_b = parse(os.path.join(d, "b"), errors, notes, xfer_only=True) if a.xfer_b else {}
    med = {k: statistics.median(v.values()) for k, v in series.items()}
    rounds = max((max(v) for v in series.values()), default=0)
    mb = lambda v: f"{v / 1e6:.1f} MB/s"

    rows = []
    for op in ("write", "read"):
        peer = f"ib_{op}_bw"
        for variant in VARIANTS:
            for k in sorted((k for k in med if k.startswith(f"{variant}xfer_{op}_64k_d")),
                            key=lambda k: int(k.rsplit("_d", 1)[1])):
                depth = k.rsplit("_d", 1)[1]
                label = f"rdma {op.upper()} 64 KiB, depth {depth}" + LABELS[variant]
                if peer in med:
                    ratio = med[k] / med[peer]
                    rows.append((label, mb(med[k]), f"{peer} -s 65536 -D 2", mb(med[peer]), ratio, "≥ 0.9", ratio >= 0.9))
    for variant in VARIANTS:
        k = f"{variant}xfer_write_8_p50_us"
        if k in med and "ib_write_lat_typical_us" in med:
            rtt = 2 * med["ib_write_lat_typical_us"]
            ratio = med[k] / rtt
            rows.append(("rdma WRITE 8 B round trip p50, depth 1" + LABELS[variant],
                         f"{med[k]:.1f} µs", "ib_write_lat t_typical × 2", f"{rtt:.1f} µs", ratio, "≤ 1.2", ratio <= 1.2))

    print(f"Medians of {rounds} interleaved rounds.\n")
    print("| target | xfer | peer | peer figure | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, x, peer, pv, ratio, goal, ok in rows:
        print(f"| {name} | {x} | {peer} | {pv} | {ratio:.2f} | {goal} | {'yes' if ok else '**no**'} |")
    for variant in VARIANTS:
        if f"{variant}xfer_write_8_p99_us" in med:
            print(f"| rdma WRITE 8 B round trip p99{LABELS[variant]} | {med[f'{variant}xfer_write_8_p99_us']:.1f} µs "
                  f"| ib_write_lat 99% × 2 | {2 * med['ib_write_lat_p99_us']:.1f} µs | "
                  f"{med[f'{variant}xfer_write_8_p99_us'] / (2 * med['ib_write_lat_p99_us']):.2f} | (none) | |")
        for q, pk, plabel in (("p50", "typical", "t_typical"), ("p99", "p99", "99%")):
            p = med.get(f"ib_read_lat_{pk}_us")
            for op, label in (("write", "WRITE 8 B round trip {q}, against a READ"), ("read", "READ 8 B round trip {q}")):
                x = med.get(f"{variant}xfer_{op}_8_{q}_us")
                if x is not None and p is not None:
                    print(f"| rdma {label.format(q=q)}{LABELS[variant]} | {x:.1f} µs "
                          f"| ib_read_lat -s 8 {plabel} | {p:.1f} µs | {x / p:.2f} | (none) | |")

    print("\nPer-round values (MB/s = 10^6 B/s; latencies in µs):\n")
    for k in sorted(series):
        v = series[k]
        scale = 1e6 if not k.endswith("_us") else 1
        print(f"- {k}: " + ", ".join(f"{v[r] / scale:.4g}" if r in v else "—" for r in range(1, rounds + 1))
              + f" (median {med[k] / scale:.4g})")

    regmr = [json.loads(l) for l in read(os.path.join(d, "regmr")).splitlines() if l.startswith("{")]
    if regmr:
        print(f"\nMemory registration on {a.device} (regmr; µs per MiB; warm = median of N reg/dereg of an already-populated mapping):\n")
        print("| region | N | faulting in a fresh mapping (no reg) | first reg_mr of a fresh mapping | warm reg_mr | warm dereg_mr | warm reg + dereg |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for x in regmr:
            touch = f"{x['touch_us_per_mib']:.1f}" if "touch_us_per_mib" in x else "—"
            print(f"| {x['size_mib']} MiB | {x['iters']} | {touch} | {x['cold_reg_us_per_mib']:.1f} | {x['reg_us_per_mib']:.1f} "
                  f"| {x['dereg_us_per_mib']:.1f} | {x['reg_dereg_us_per_mib']:.1f} |")

    if errors or notes:
        print("\nProblems:\n")
        for e in errors + notes:
            print(f"- {e}")
    env = read(os.path.join(d, "env.txt"))
    if env:
        print("\nEnvironment:\n\n```\n" + env.strip() + "\n```")

    extra = {"device": a.device, "regmr": regmr, "problems": errors + notes}
    if a.xfer_b:
        extra["regmr_b"] = [json.loads(l) for l in read(os.path.join(d, "b", "regmr")).splitlines() if l.startswith("{")]
    if os.environ.get("BENCH_HOST"):
        extra["host"] = os.environ["BENCH_HOST"]
    results.write(a.out, "verbs", targets_of(series, series_b, a.device, bool(a.xfer_b)), rounds, a.xfer,
                  a.xfer_b, extra=extra, command_text=a.command)


if __name__ == "__main__":
    main()
