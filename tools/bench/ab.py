#!/usr/bin/env python3
"""Merges the results files of an A/B run (tools/bench/ab.sh) into one A/B file.

Each script ran with --xfer A --xfer-b B, so each of its targets has the
series of both binaries, interleaved in the same rounds, and the peer's.
The A/B file keeps, per target, A's and B's medians and rounds, B / A and
the peer's median, and names the revisions; tools/bench/report.py --ab
renders it.

Usage: tools/bench/ab.py --rev-a REV --commit-a SHA --rev-b REV --commit-b SHA
                         --command CMD --out FILE RESULTS.json ...
"""
import argparse
import json
import sys

import report
import results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for w in ("a", "b"):
        ap.add_argument(f"--rev-{w}", required=True)
        ap.add_argument(f"--commit-{w}", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    targets, sources, rounds = [], [], {}
    for p in a.files:
        with open(p) as f:
            doc = json.load(f)
        if not doc.get("xfer_b"):
            sys.exit(f"ab.py: {p} has no second binary's figures (it was not run with --xfer-b)")
        sources.append({"file": p, "script": doc["script"], "command": doc["command"], "date": doc["date"]})
        rounds[doc["script"]] = doc["rounds"]
        for t in doc["targets"]:
            if t.get("table") == "latency":
                continue  # latencies of A alone: the A/B compares what both binaries measured
            xa, xb = t["xfer"], t.get("xfer_b") or {"median": None, "rounds": []}
            ratio = xb["median"] / xa["median"] if xa.get("median") and xb.get("median") is not None else None
            targets.append({"id": t["id"], "group": t["group"], "name": t["name"], "unit": t["unit"],
                            "a": {"median": xa.get("median"), "rounds": xa.get("rounds", [])},
                            "b": {"median": xb.get("median"), "rounds": xb.get("rounds", [])},
                            "b_over_a": ratio, "peer": t.get("peer"), "goal": t.get("goal")})
    doc = results.write(a.out, "ab", targets, rounds, None, None, command_text=a.command,
                        extra={"a": {"rev": a.rev_a, "commit": a.commit_a},
                               "b": {"rev": a.rev_b, "commit": a.commit_b}, "sources": sources})
    print(report.ab_table(doc))


if __name__ == "__main__":
    main()
