"""The machine-readable results file that every comparison script writes.

One JSON object per run of a script (tools/bench/README.md, "Results
files"):

    {
      "script": "peers",                       # which script
      "command": "tools/bench/peers.py --rounds 5",
      "date": "2026-11-24T23:40:12Z",          # UTC, when the run ended
      "commit": "f5c5c48-dirty",               # git rev-parse --short HEAD
      "machine": {"nproc": 2, "kernel": "6.18.44", "where": "host"},
      "rounds": 5,
      "xfer": "/path/to/xfer", "xfer_b": null,  # the binaries measured
      "targets": [
        {"id": "tcp-write-1m", "group": "tcp-shm",
         "name": "tcp WRITE 1 MiB, depth 4", "unit": "B/s",
         "xfer": {"median": 3.3e9, "rounds": [...], "command": "xfer bench ..."},
         "xfer_b": {"median": ..., "rounds": [...]},      # only in an A/B run
         "peer": {"name": "iperf3, one stream", "median": 3.2e9,
                  "rounds": [...], "command": "iperf3 -c 127.0.0.1 ..."},
         # Where the run timed single operations, either series may carry
         # the medians over its rounds of each round's percentiles, in µs:
         #   "latency": {"p50_us": 18.0, "p99_us": 94.8, "p999_us": 210.3}
         # (a percentile the tool does not give is null). A target with
         # "table": "latency" holds latencies only: report.py renders it in
         # the group's latency table and not in its main one.
         "ratio": 1.02,            # xfer median / peer median (null: no peer)
         "goal": {"text": ">= 1.0", "on": "ratio", "op": ">=", "value": 1.0},
         "met": true}              # null when there is no goal
      ]
    }

Units are base units: "B/s" (bytes per second), "us" (microseconds),
"ops/s". A goal is on the ratio ("on": "ratio") or on the xfer figure
itself ("on": "xfer", in the target's unit); a target with no goal has
"goal": null. A lower-is-better target (a latency) has op "<=" or "<".
"""
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
}


def goal(text, on="ratio"):
    """A goal from its text, e.g. ">= 1.0" (on the ratio) or "< 30" (on xfer's figure)."""
    op, value = text.split()
    if op not in OPS:
        raise ValueError(f"goal {text!r}: operator must be one of {', '.join(OPS)}")
    return {"text": text, "on": on, "op": op, "value": float(value)}


SYMBOLS = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}
UNITS = {"us": "µs", "B/s": "B/s", "ops/s": "ops/s"}


def goal_text(g, unit):
    """A goal for people: "≥ 1.0×" on a ratio, "< 30 µs" on xfer's own figure, "(none)"."""
    if not g:
        return "(none)"
    v = f"{g['value']:g}"
    if g["on"] == "ratio":
        return f"{SYMBOLS[g['op']]} {v if '.' in v else v + '.0'}×"
    return f"{SYMBOLS[g['op']]} {v} {UNITS.get(unit, unit)}"


def commit(root=ROOT):
    """`git rev-parse --short HEAD`, with -dirty when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head + ("-dirty" if dirty else "")


def machine():
    return {"nproc": os.cpu_count(), "kernel": platform.release(),
            "where": "vm" if os.environ.get("RDMA_VM") == "1" else "host"}


def command(argv=None):
    """The script invocation, relative to the repository root when it lies inside it."""
    argv = list(sys.argv if argv is None else argv)
    p = os.path.abspath(argv[0])
    if p.startswith(ROOT + os.sep):
        argv[0] = os.path.relpath(p, ROOT)
    return shlex.join(argv)


LATENCY_KEYS = ("p50_us", "p99_us", "p999_us")


def latency(rounds):
    """The medians over rounds of each round's p50, p99 and p99.9 in µs.

    rounds is a list of dicts with the keys of LATENCY_KEYS; a percentile
    that no round has (None or absent) is None."""
    out = {}
    for k in LATENCY_KEYS:
        vs = [r[k] for r in rounds if r.get(k) is not None]
        out[k] = statistics.median(vs) if vs else None
    return out


def series(rounds, command=None, name=None, latency=None):
    """A measured series: its median and the per-round values (and, optionally, its latency())."""
    s = {"median": statistics.median(rounds) if rounds else None, "rounds": list(rounds)}
    if name is not None:
        s["name"] = name
    if command is not None:
        s["command"] = command
    if latency is not None:
        s["latency"] = latency
    return s


def latency_target(id, group, name, xfer, peer=None):
    """A target of latencies only (its series carry latency()), for the group's latency table.

    Its median is the p50, so that the ratio and report.py's checks work as for any target."""
    t = target(id, group, name, "us", dict(xfer, median=xfer["latency"]["p50_us"]),
               dict(peer, median=peer["latency"]["p50_us"]) if peer else None)
    t["table"] = "latency"
    return t


def target(id, group, name, unit, xfer, peer=None, goal=None, xfer_b=None):
    """One target: xfer's series, the peer's (or None), the ratio and whether the goal is met."""
    t = {"id": id, "group": group, "name": name, "unit": unit, "xfer": xfer}
    if xfer_b is not None:
        t["xfer_b"] = xfer_b
    t["peer"] = peer
    ratio = None
    if peer and peer.get("median") and xfer.get("median") is not None:
        ratio = xfer["median"] / peer["median"]
    t["ratio"] = ratio
    t["goal"] = goal
    met = None
    if goal is not None:
        v = ratio if goal["on"] == "ratio" else xfer.get("median")
        met = None if v is None else OPS[goal["op"]](v, goal["value"])
    t["met"] = met
    return t


def write(path, script, targets, rounds, xfer, xfer_b=None, extra=None, argv=None, command_text=None):
    """Writes the results file (creating its directory) and returns the object written."""
    doc = {
        "script": script,
        "command": command_text or command(argv),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "machine": machine(),
        "rounds": rounds,
        "xfer": xfer,
        "xfer_b": xfer_b,
        "targets": targets,
    }
    if extra:
        doc.update(extra)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    print(f"results: {path}", file=sys.stderr)
    return doc


def default_path(script):
    return os.path.join(ROOT, "bench-out", f"{script}.json")
