#!/usr/bin/env python3
"""The KV server's disk tier against fio on the same file system (docs/KV.md, "The disk tier").

Each round runs, in turn:
  - the kv package's BenchmarkDiskTierGet (a test binary built once from
    --xfer-src): GETs of 1 MiB and 4 KiB values only on disk, one client
    over tcp and shm, the tier's file in --dir, and the same server's GET
    of a 1 MiB value in memory;
  - fio (Debian's) random reads of 1 MiB and of 4 KiB blocks with O_DIRECT,
    one job at depth 1 (psync), on a 1 GiB file in --dir;
  - with --ab-base REV, BenchmarkGet's 1 MiB GET of one client (memory
    tier, no disk tier) from a test binary of REV and of the work tree, for
    the memory-tier A/B.
It prints the medians over ROUNDS rounds, and writes the results file
(tools/bench/results.py) to bench-out/kvdisk.json or --out. Goals: a
disk-tier 1 MiB GET at least 0.8x fio's 1 MiB random read in bytes per
second; a 4 KiB GET's p99 against fio's (no goal); the memory-tier GET no
slower than before (ratio >= 0.95 against the base).

Usage: tools/bench/kvdisk.py [--rounds N] [--dir DIR] [--out FILE] [--ab-base REV]
Needs: fio (tools/deps.sh installs it), go.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results  # noqa: E402

ROOT = results.ROOT


def run(cmd, env=None, cwd=ROOT, timeout=900):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=cwd, timeout=timeout).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"kvdisk.py: {' '.join(cmd)}: exit {e.returncode}: {e.stderr.strip()[-800:]}")


def build_test(src, out):
    run(["go", "test", "-c", "-o", out, "./kv/"], cwd=src)
    return out


BENCH_LINE = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$")


def parse_bench(out):
    """{name: {"ns": ns/op, "bps": bytes/s, "p50_us", "p99_us"}} from go test -bench output."""
    rows = {}
    for line in out.splitlines():
        m = BENCH_LINE.match(line.strip())
        if not m:
            continue
        fields = m.group(3).split()
        vals = {fields[i + 1]: float(fields[i]) for i in range(0, len(fields) - 1, 2)}
        r = {"ns": vals.get("ns/op")}
        if "MB/s" in vals:
            r["bps"] = vals["MB/s"] * 1e6
        if "p50-ns" in vals:
            r["p50_us"], r["p99_us"] = vals["p50-ns"] / 1e3, vals["p99-ns"] / 1e3
        rows[m.group(1)] = r
    return rows


def bench(binary, pattern, benchtime, env):
    return parse_bench(run([binary, "-test.run=^$", f"-test.bench={pattern}", f"-test.benchtime={benchtime}"], env=env))


def fio(path, bs, seconds):
    out = run(["fio", "--name=randread", f"--filename={path}", "--size=1G", "--rw=randread", f"--bs={bs}",
               "--direct=1", "--ioengine=psync", "--iodepth=1", "--numjobs=1", f"--runtime={seconds}",
               "--time_based", "--output-format=json"])
    j = json.loads(out)["jobs"][0]["read"]
    pct = j["clat_ns"].get("percentile", {})
    return {"bps": j["bw_bytes"], "p50_us": pct.get("50.000000", 0) / 1e3, "p99_us": pct.get("99.000000", 0) / 1e3}


def med(rows, key):
    return results.series([r[key] for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="directory on the file system to measure (default: a temporary one under /var/tmp)")
    ap.add_argument("--out", default=results.default_path("kvdisk"))
    ap.add_argument("--ab-base", default=None, help="git revision of the memory-tier A/B's base")
    ap.add_argument("--fio-seconds", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("fio"):
        sys.exit("kvdisk.py: fio is missing (apt-get install fio; tools/deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="kvdisk-", dir=args.dir or "/var/tmp")
    tmp = tempfile.mkdtemp(prefix="kvdisk-bin-")
    try:
        cur = build_test(ROOT, os.path.join(tmp, "kv.test"))
        base = None
        if args.ab_base:
            wt = os.path.join(tmp, "base")
            run(["git", "worktree", "add", "--detach", wt, args.ab_base])
            try:
                base = build_test(wt, os.path.join(tmp, "kv-base.test"))
            finally:
                run(["git", "worktree", "remove", "--force", wt])
        env = dict(os.environ, XFER_BENCH_DISK_DIR=work, GOMAXPROCS=os.environ.get("GOMAXPROCS", "2"))
        fiofile = os.path.join(work, "fio.dat")
        rows = {k: [] for k in ("tcp1m", "shm1m", "tcp4k", "shm4k", "mem", "fio1m", "fio4k", "ab_a", "ab_b")}
        for r in range(args.rounds):
            b = bench(cur, "BenchmarkDiskTierGet", "400x", env)
            rows["tcp1m"].append(b["BenchmarkDiskTierGet/tcp/1048576B"])
            rows["shm1m"].append(b["BenchmarkDiskTierGet/shm/1048576B"])
            rows["tcp4k"].append(b["BenchmarkDiskTierGet/tcp/4096B"])
            rows["shm4k"].append(b["BenchmarkDiskTierGet/shm/4096B"])
            rows["mem"].append(b["BenchmarkDiskTierGet/tcp/memory/1048576B"])
            rows["fio1m"].append(fio(fiofile, "1M", args.fio_seconds))
            rows["fio4k"].append(fio(fiofile, "4k", args.fio_seconds))
            if base:
                pat = "BenchmarkGet/tcp/data/1048576B/c1$"
                order = [("ab_a", base), ("ab_b", cur)] if r % 2 == 0 else [("ab_b", cur), ("ab_a", base)]
                for k, binary in order:
                    rows[k].append(bench(binary, pat, "2000x", env)["BenchmarkGet/tcp/data/1048576B/c1"])
            print(f"round {r + 1}: disk GET 1 MiB tcp {rows['tcp1m'][-1]['bps'] / 1e6:.0f} MB/s, "
                  f"fio 1 MiB {rows['fio1m'][-1]['bps'] / 1e6:.0f} MB/s", file=sys.stderr)
        fio_cmd = f"fio --rw=randread --bs=1M --direct=1 --ioengine=psync --iodepth=1 --size=1G --runtime={args.fio_seconds}"
        lat = lambda rs: {"p50_us": med(rs, "p50_us")["median"], "p99_us": med(rs, "p99_us")["median"], "p999_us": None}
        targets = []
        for tr in ("tcp", "shm"):
            targets.append(results.target(f"kvdisk-{tr}-get-1m", "kvdisk", f"{tr}: disk-tier GET 1 MiB vs fio O_DIRECT random read 1 MiB",
                                          "B/s", results.series([x["bps"] for x in rows[f"{tr}1m"]], "BenchmarkDiskTierGet", latency=lat(rows[f"{tr}1m"])),
                                          results.series([x["bps"] for x in rows["fio1m"]], fio_cmd, "fio", latency=lat(rows["fio1m"])),
                                          goal=results.goal(">= 0.8")))
            targets.append(results.latency_target(f"kvdisk-{tr}-get-4k-lat", "kvdisk", f"{tr}: disk-tier GET 4 KiB vs fio 4 KiB random read, latency",
                                                  results.series([x["p50_us"] for x in rows[f"{tr}4k"]], "BenchmarkDiskTierGet", latency=lat(rows[f"{tr}4k"])),
                                                  results.series([x["p50_us"] for x in rows["fio4k"]], fio_cmd.replace("1M", "4k"), "fio", latency=lat(rows["fio4k"]))))
        targets.append(results.target("kvdisk-memory-get-1m", "kvdisk", "tcp: GET 1 MiB from memory, disk tier on", "B/s",
                                      results.series([x["bps"] for x in rows["mem"]], "BenchmarkDiskTierGet/tcp/memory")))
        if base:
            targets.append(results.target("kvdisk-ab-memory-get-1m", "kvdisk", "tcp: BenchmarkGet 1 MiB c1, this tree vs " + args.ab_base, "B/s",
                                          results.series([x["bps"] for x in rows["ab_b"]], "BenchmarkGet (this tree)"),
                                          results.series([x["bps"] for x in rows["ab_a"]], "BenchmarkGet (" + args.ab_base + ")", "base"),
                                          goal=results.goal(">= 0.95")))
        results.write(args.out, "kvdisk", targets, args.rounds, cur)
        for t in targets:
            x, p = t["xfer"], t["peer"]
            print(f"{t['name']}: {x['median']:.4g} {t['unit']}" + (f" vs {p['median']:.4g} (ratio {t['ratio']:.2f})" if p else "")
                  + (f" p99 {x['latency']['p99_us']:.0f} us vs {p['latency']['p99_us']:.0f} us" if p and x.get("latency") else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
