#!/usr/bin/env python3
"""Writes the current figures of docs/BENCHMARKS.md from results files.

Each table of current figures in docs/BENCHMARKS.md lies between two
markers, `<!-- BEGIN current GROUP -->` and `<!-- END current GROUP -->`,
and has one row per target, keyed by the target's id (the first column).
For every target in the results files (tools/bench/results.py) this
replaces the row of the same id in its group's table, or adds one at the
end. A target that the results do not mention keeps its row, so a partial
run updates only what it measured. Running it twice changes nothing.
A new row whose id names a measurement mode after its loopback twin's
(`tcp-write-1m-netns`, `kv-tcp-get-4k-c1-netns-50us`: peers.py and kv.py
with --netns) goes right below that twin's row, or below the twin's other
modes' rows, when the twin is in the table; any other new row goes at the
end.

A target whose xfer series carries latencies (p50, p99, p99.9) also has a
row, of the same id, in its group's latency table, between
`<!-- BEGIN latency GROUP -->` and `<!-- END latency GROUP -->`: xfer's
three percentiles beside the peer's from the same run. A target of
latencies only ("table": "latency") has a row there alone.

Usage:
  tools/bench/report.py [--doc docs/BENCHMARKS.md] [--dry-run] [RESULTS.json ...]
      default files: every results file in bench-out/ (A/B files excepted)
  tools/bench/report.py --ab bench-out/ab.json [--doc-section]
      prints the A/B (tools/bench/ab.sh) as a Markdown table, for a commit
      message; with --doc-section also writes it into docs/BENCHMARKS.md
      between `<!-- BEGIN ab -->` and `<!-- END ab -->`.
"""
import argparse
import glob
import json
import os
import re
import sys

import results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")

HEADER = ("| id | target | command | peer | peer figure | xfer | ratio | goal | met | date | commit |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
LATENCY_HEADER = ("| id | target | xfer p50 | xfer p99 | xfer p99.9 | peer | peer p50 | peer p99 | peer p99.9 | date | commit |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
HEADERS = {"current": HEADER, "latency": LATENCY_HEADER}
BEGIN = re.compile(r"^<!-- BEGIN (current|latency) ([a-z0-9-]+) -->$")


def figure(v, unit):
    """A figure for people, in the unit's usual scale."""
    if v is None:
        return "not measured yet"
    if unit == "B/s":
        return f"{v / 1e9:.2f} GB/s" if v >= 1e9 else f"{v / 1e6:.1f} MB/s"
    if unit == "us":
        return f"{v:.1f} µs"
    if unit == "ops/s":
        return f"{v:,.0f} ops/s"
    return f"{v:g} {unit}"


def when(iso):
    """2026-11-22T06:34:00Z -> 2026-11-22 06:34 UTC."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d)?Z", iso or "")
    return f"{m.group(1)} {m.group(2)} UTC" if m else (iso or "")


def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def row(t, doc):
    """One table row of a target of results file doc."""
    peer = t.get("peer")
    x = t["xfer"].get("median")
    ratio = t.get("ratio")
    met = t.get("met")
    cells = [
        f"`{t['id']}`",
        t["name"],
        f"`{doc['command']}`",
        peer["name"] if peer else "(absolute)",
        figure(peer.get("median"), t["unit"]) if peer else "",
        figure(x, t["unit"]),
        "" if ratio is None else f"{ratio:.2f}",
        results.goal_text(t.get("goal"), t["unit"]),
        "" if met is None else ("yes" if met else "**no**"),
        when(doc["date"]),
        f"`{doc['commit']}`",
    ]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def latency_row(t, doc):
    """The latency table's row of a target whose series carry latencies."""
    peer = t.get("peer")

    def us(s, k):
        if not s or not s.get("latency"):
            return ""
        v = s["latency"].get(k)
        if v is None:
            return "(not given)"
        return f"{v:.1f} µs" if v < 100 else f"{v:,.0f} µs"
    cells = [f"`{t['id']}`", t["name"]]
    cells += [us(t["xfer"], k) for k in results.LATENCY_KEYS]
    cells.append(peer["name"] if peer else "(none)")
    cells += [us(peer, k) for k in results.LATENCY_KEYS]
    cells += [when(doc["date"]), f"`{doc['commit']}`"]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def row_date(line):
    """The date cell of a row (the one before the commit), when it is in when()'s form; "" otherwise."""
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    d = cells[-2] if len(cells) == 11 else ""
    return d if re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", d) else ""


# The suffixes of the ids of measurement modes other than loopback
# (tools/bench/netns.py: -netns, -netns-DELAY).
MODE = re.compile(r"-netns(-[0-9.]+(us|ms))?$")


def twin(rid):
    """The id of the loopback target that rid measures in another mode; None for a loopback id."""
    m = MODE.search(rid)
    return rid[:m.start()] if m else None


def place(order, rid):
    """Where a new row rid goes in order, a table's ids: below its loopback twin and the twin's
    other modes' rows, when the twin is there; else at the end."""
    base = twin(rid)
    if base is None or base not in order:
        return len(order)
    i = order.index(base) + 1
    while i < len(order) and twin(order[i]) == base:
        i += 1
    return i


def row_id(line):
    m = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
    return m.group(1) if m else None


def load(paths):
    """The rows to write, by table ("current GROUP", "latency GROUP") and id: the newest measurement of each id wins."""
    by_group = {}
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"report.py: {p}: {e}")
        if not isinstance(doc, dict) or "targets" not in doc or "script" not in doc:
            print(f"report.py: {p}: not a results file (no script or targets), skipped", file=sys.stderr)
            continue
        if doc.get("xfer_b") or doc["script"] == "ab":
            print(f"report.py: {p}: an A/B run, skipped (render it with --ab)", file=sys.stderr)
            continue
        for t in doc["targets"]:
            if t["xfer"].get("median") is None:
                continue  # nothing measured: keep the row that is there
            tables = []
            if t.get("table") != "latency":
                tables.append(("current " + t["group"], row))
            if t["xfer"].get("latency"):
                tables.append(("latency " + t["group"], latency_row))
            for table, render in tables:
                g = by_group.setdefault(table, {})
                old = g.get(t["id"])
                if old is None or old[1]["date"] <= doc["date"]:
                    g[t["id"]] = (render(t, doc), doc)
    return by_group


def update(text, by_group):
    """text with the rows of by_group written into their tables; the tables ("current GROUP") it lacks."""
    lines = text.split("\n")
    out, i, seen = [], 0, set()
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = BEGIN.match(line.strip())
        i += 1
        if not m:
            continue
        kind, group = m.group(1), f"{m.group(1)} {m.group(2)}"
        end = f"<!-- END {group} -->"
        j = i
        while j < len(lines) and lines[j].strip() != end:
            j += 1
        if j == len(lines):
            sys.exit(f"report.py: no '{end}' after '{line.strip()}'")
        seen.add(group)
        rows, order = {}, []
        for l in lines[i:j]:
            rid = row_id(l)
            if rid:
                rows[rid] = l
                order.append(rid)
            elif l.strip() and not l.startswith("| id |") and not l.startswith("| --- |"):
                sys.exit(f"report.py: between the markers of {group}, a line that is not a target's row: {l!r}")
        for rid, (r, doc) in by_group.get(group, {}).items():
            if rid not in rows:
                order.insert(place(order, rid), rid)
            elif row_date(rows[rid]) > when(doc["date"]):
                print(f"report.py: {rid}: the document's row is newer than the results of {doc['date']}; kept",
                      file=sys.stderr)
                continue
            rows[rid] = r
        out.append(HEADERS[kind])
        out.extend(rows[rid] for rid in order)
        out.append(lines[j])
        i = j + 1
    return "\n".join(out), sorted(set(by_group) - seen)


def ab_table(ab):
    """The A/B file of tools/bench/ab.sh as Markdown."""
    a, b = ab["a"], ab["b"]
    name = lambda w: w["rev"] if w["commit"].startswith(w["rev"]) else f"{w['rev']} ({w['commit']})"
    out = [f"### A/B: {name(a)} against {name(b)}",
           "",
           f"{when(ab['date'])}, `{ab['command']}`: medians of interleaved rounds (A, B, A, B, ...) and the "
           f"peer's from the same rounds; B / A is B's median over A's. Machine: {ab['machine']['nproc']} CPUs, "
           f"kernel {ab['machine']['kernel']}; the scripts at `{ab['commit']}`.",
           "",
           "| id | target | A | B | B / A | peer | peer figure | rounds |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in ab["targets"]:
        p = t.get("peer")
        ba = "" if t.get("b_over_a") is None else f"{t['b_over_a']:.2f}"
        out.append("| " + " | ".join(cell(c) for c in (
            f"`{t['id']}`", t["name"], figure(t["a"]["median"], t["unit"]), figure(t["b"]["median"], t["unit"]), ba,
            p["name"] if p else "(none)", figure(p["median"], t["unit"]) if p else "", len(t["a"]["rounds"]))) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="results files (default: bench-out/*.json)")
    ap.add_argument("--doc", default=DOC)
    ap.add_argument("--dry-run", action="store_true", help="print the new document instead of writing it")
    ap.add_argument("--ab", metavar="FILE", help="render an A/B file of tools/bench/ab.sh")
    ap.add_argument("--doc-section", action="store_true", help="with --ab: also write it into the document")
    a = ap.parse_args()
    with open(a.doc) as f:
        text = f.read()
    if a.ab:
        with open(a.ab) as f:
            ab = json.load(f)
        if ab.get("script") != "ab":
            sys.exit(f"report.py: {a.ab} is not an A/B file of tools/bench/ab.sh")
        table = ab_table(ab)
        print(table)
        if not a.doc_section:
            return
        m = re.search(r"(<!-- BEGIN ab -->\n)(.*?)(<!-- END ab -->)", text, re.S)
        if not m:
            sys.exit(f"report.py: {a.doc} has no '<!-- BEGIN ab -->' ... '<!-- END ab -->' section")
        new = text[:m.end(1)] + table + "\n" + text[m.start(3):]
    else:
        files = a.files or sorted(glob.glob(os.path.join(ROOT, "bench-out", "*.json")))
        if not files:
            sys.exit("report.py: no results files (run a benchmark script first, or name the files)")
        new, missing = update(text, load(files))
        for g in missing:
            print(f"report.py: {a.doc} has no table {g} (<!-- BEGIN {g} -->); its rows are left out", file=sys.stderr)
    if a.dry_run:
        sys.stdout.write(new)
    elif new != text:
        with open(a.doc, "w") as f:
            f.write(new)
        print(f"report.py: {a.doc} updated", file=sys.stderr)
    else:
        print(f"report.py: {a.doc} unchanged", file=sys.stderr)


if __name__ == "__main__":
    main()
