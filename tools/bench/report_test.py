#!/usr/bin/env python3
"""Tests of results.py and report.py: python3 -m unittest discover -s tools/bench -p '*_test.py'."""
import json
import os
import tempfile
import unittest

import report
import results

DOC = """# Benchmarks

<!-- BEGIN current tcp-shm -->
| id | target | command | peer | peer figure | xfer | ratio | goal | met | date | commit |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| `tcp-write-1m` | tcp WRITE 1 MiB, depth 4 | `old` | iperf3, one stream | 3.23 GB/s | 3.30 GB/s | 1.02 | ≥ 1.0× | yes | 2026-11-22 06:34 UTC | `bded087` |
| `shm-read-1m` | shm READ 1 MiB, depth 1 | `old` | C memcpy, 1 thread | 16.31 GB/s | 16.34 GB/s | 1.00 | ≥ 0.8× | yes | 2026-11-22 06:34 UTC | `bded087` |
<!-- END current tcp-shm -->

text between the tables stays

<!-- BEGIN current kv -->
| id | target | command | peer | peer figure | xfer | ratio | goal | met | date | commit |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
<!-- END current kv -->

<!-- BEGIN latency kv -->
| id | target | xfer p50 | xfer p99 | xfer p99.9 | peer | peer p50 | peer p99 | peer p99.9 | date | commit |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| `kv-tcp-get-4k-c16` | tcp GET 4 KiB, 16 clients | 1.0 µs | 2.0 µs | 3.0 µs | redis-benchmark | 4.0 µs | 5.0 µs | 6.0 µs | 2026-11-22 06:34 UTC | `bded087` |
<!-- END latency kv -->
"""


def run_doc(date, targets):
    return {"script": "peers", "command": "tools/bench/peers.py --rounds 5", "date": date, "commit": "abc1234",
            "machine": {"nproc": 2, "kernel": "6.18"}, "rounds": 5, "xfer": "./xfer", "xfer_b": None,
            "targets": targets}


def tcp_write(x, peer):
    return results.target("tcp-write-1m", "tcp-shm", "tcp WRITE 1 MiB, depth 4", "B/s",
                          results.series([x, x], "xfer bench ..."),
                          results.series([peer, peer], "iperf3 ...", "iperf3, one stream"), results.goal(">= 1.0"))


def by_group(*docs):
    out = {}
    for d in docs:
        for t in d["targets"]:
            if t.get("table") != "latency":
                out.setdefault("current " + t["group"], {})[t["id"]] = (report.row(t, d), d)
            if t["xfer"].get("latency"):
                out.setdefault("latency " + t["group"], {})[t["id"]] = (report.latency_row(t, d), d)
    return out


class TargetTest(unittest.TestCase):
    def test_ratio_goal(self):
        t = tcp_write(2.0e9, 2.5e9)
        self.assertAlmostEqual(t["ratio"], 0.8)
        self.assertFalse(t["met"])
        self.assertTrue(tcp_write(3.0e9, 2.5e9)["met"])

    def test_lower_is_better(self):
        rtt = lambda x: results.target("rtt", "tcp-shm", "rtt", "us", results.series([x]),
                                       results.series([10.0], name="qperf"), results.goal("<= 1.2"))
        self.assertTrue(rtt(12.0)["met"])
        self.assertFalse(rtt(12.5)["met"])

    def test_absolute_goal(self):
        t = results.target("p99", "tcp-shm", "p99", "us", results.series([90.0, 120.0, 95.0]), None,
                           results.goal("< 100", on="xfer"))
        self.assertEqual(t["xfer"]["median"], 95.0)
        self.assertIsNone(t["ratio"])
        self.assertTrue(t["met"])
        self.assertEqual(results.goal_text(t["goal"], "us"), "< 100 µs")

    def test_bad_goal(self):
        with self.assertRaises(ValueError):
            results.goal("=> 1.0")


class UpdateTest(unittest.TestCase):
    def test_replaces_only_what_was_measured(self):
        new, missing = report.update(DOC, by_group(run_doc("2026-11-24T10:00:00Z", [tcp_write(4e9, 2e9)])))
        self.assertEqual(missing, [])
        self.assertIn("| `tcp-write-1m` | tcp WRITE 1 MiB, depth 4 | `tools/bench/peers.py --rounds 5` | "
                      "iperf3, one stream | 2.00 GB/s | 4.00 GB/s | 2.00 | ≥ 1.0× | yes | 2026-11-24 10:00 UTC | "
                      "`abc1234` |", new)
        self.assertNotIn("3.30 GB/s", new)
        # The target the run did not measure keeps its row, the text its place.
        self.assertIn("| `shm-read-1m` | shm READ 1 MiB, depth 1 | `old` |", new)
        self.assertIn("text between the tables stays", new)

    def test_idempotent(self):
        groups = by_group(run_doc("2026-11-24T10:00:00Z", [tcp_write(4e9, 2e9)]))
        once, _ = report.update(DOC, groups)
        twice, _ = report.update(once, groups)
        self.assertEqual(once, twice)

    def test_new_target_appended_and_missing_table_reported(self):
        kv = results.target("kv-tcp-get-4k-c1", "kv", "tcp GET 4 KiB, 1 client", "ops/s", results.series([5.0]),
                            results.series([4.0], name="redis-benchmark"), results.goal(">= 1.0"))
        nowhere = results.target("x", "allocs", "x", "ops/s", results.series([1.0]), None, None)
        new, missing = report.update(DOC, by_group(run_doc("2026-11-24T10:00:00Z", [kv, nowhere])))
        self.assertEqual(missing, ["current allocs"])
        kv_table = new.split("<!-- BEGIN current kv -->")[1].split("<!-- END current kv -->")[0]
        self.assertIn("| `kv-tcp-get-4k-c1` | tcp GET 4 KiB, 1 client |", kv_table)
        self.assertIn("| 4 ops/s | 5 ops/s | 1.25 | ≥ 1.0× | yes |", kv_table)

    def test_mode_rows_beside_their_twins(self):
        """A -netns row goes below its loopback twin (and the twin's other modes' rows); one without a
        twin in the table, at the end."""
        def t(id, x):
            return results.target(id, "tcp-shm", id, "B/s", results.series([x]),
                                  results.series([1e9], name="iperf3, one stream"), None)
        doc = run_doc("2026-11-24T10:00:00Z", [t("tcp-write-1m-netns", 2e9), t("shm-read-1m-netns-50us", 3e9),
                                               t("tcp-read-1m-netns", 4e9)])
        new, _ = report.update(DOC, by_group(doc))
        ids = [report.row_id(l) for l in new.split("<!-- BEGIN current tcp-shm -->")[1]
               .split("<!-- END current tcp-shm -->")[0].splitlines() if report.row_id(l)]
        self.assertEqual(ids, ["tcp-write-1m", "tcp-write-1m-netns", "shm-read-1m", "shm-read-1m-netns-50us",
                               "tcp-read-1m-netns"])
        doc2 = run_doc("2026-11-24T11:00:00Z", [t("tcp-write-1m-netns-50us", 5e9), t("shm-read-1m-netns", 6e9)])
        again, _ = report.update(new, by_group(doc2))
        ids = [report.row_id(l) for l in again.split("<!-- BEGIN current tcp-shm -->")[1]
               .split("<!-- END current tcp-shm -->")[0].splitlines() if report.row_id(l)]
        self.assertEqual(ids, ["tcp-write-1m", "tcp-write-1m-netns", "tcp-write-1m-netns-50us", "shm-read-1m",
                               "shm-read-1m-netns-50us", "shm-read-1m-netns", "tcp-read-1m-netns"])
        self.assertEqual(report.update(again, by_group(doc2))[0], again)

    def test_twin(self):
        self.assertEqual(report.twin("kv-tcp-get-4k-c16-p99-rate-netns"), "kv-tcp-get-4k-c16-p99-rate")
        self.assertEqual(report.twin("tcp-write-64-rtt-netns-50us"), "tcp-write-64-rtt")
        self.assertEqual(report.twin("tcp-write-64-rtt-netns-0.2ms"), "tcp-write-64-rtt")
        self.assertIsNone(report.twin("tcp-write-1m"))
        self.assertIsNone(report.twin("kv-tcp-get-4k-c1-netns-x"))

    def test_newer_row_kept(self):
        new, _ = report.update(DOC, by_group(run_doc("2026-11-20T10:00:00Z", [tcp_write(4e9, 2e9)])))
        self.assertIn("3.30 GB/s", new)

    def test_stray_line_between_markers(self):
        bad = DOC.replace("<!-- END current kv -->", "a note\n<!-- END current kv -->")
        with self.assertRaises(SystemExit):
            report.update(bad, {})

    def test_missing_end_marker(self):
        with self.assertRaises(SystemExit):
            report.update(DOC.replace("<!-- END current kv -->", ""), {})


def kv_get_c16(x_lat, peer_lat):
    lat = lambda p50, p99, p999: {"p50_us": p50, "p99_us": p99, "p999_us": p999}
    return results.target("kv-tcp-get-4k-c16", "kv", "tcp GET 4 KiB, 16 clients", "ops/s",
                          results.series([70000.0], "xfer kv bench ...", latency=lat(*x_lat)),
                          results.series([60000.0], "redis-benchmark ...", "redis-benchmark", latency=lat(*peer_lat)),
                          results.goal(">= 1.0"))


class LatencyTest(unittest.TestCase):
    def test_medians_of_rounds(self):
        rounds = [{"p50_us": 10.0, "p99_us": 90.0, "p999_us": None},
                  {"p50_us": 30.0, "p99_us": 70.0},
                  {"p50_us": 20.0, "p99_us": 80.0, "p999_us": 500.0}]
        self.assertEqual(results.latency(rounds), {"p50_us": 20.0, "p99_us": 80.0, "p999_us": 500.0})
        self.assertEqual(results.latency([{"p50_us": 1.0}])["p999_us"], None)

    def test_latency_table_beside_the_rates(self):
        t = kv_get_c16((40.5, 210.0, 1500.0), (80.0, 2263.0, 4207.0))
        new, missing = report.update(DOC, by_group(run_doc("2026-11-28T01:00:00Z", [t])))
        self.assertEqual(missing, [])
        lat = new.split("<!-- BEGIN latency kv -->")[1].split("<!-- END latency kv -->")[0]
        self.assertIn("| `kv-tcp-get-4k-c16` | tcp GET 4 KiB, 16 clients | 40.5 µs | 210 µs | 1,500 µs | "
                      "redis-benchmark | 80.0 µs | 2,263 µs | 4,207 µs | 2026-11-28 01:00 UTC | `abc1234` |", lat)
        self.assertNotIn("1.0 µs", lat)  # the older row is replaced
        # The rates go to the main table, the latencies only to theirs.
        cur = new.split("<!-- BEGIN current kv -->")[1].split("<!-- END current kv -->")[0]
        self.assertIn("| 60,000 ops/s | 70,000 ops/s | 1.17 |", cur)
        self.assertNotIn("µs", cur)
        again, _ = report.update(new, by_group(run_doc("2026-11-28T01:00:00Z", [t])))
        self.assertEqual(again, new)

    def test_missing_percentile_and_missing_table(self):
        t = kv_get_c16((40.5, 210.0, None), (80.0, 2263.0, 4207.0))
        r = report.latency_row(t, run_doc("2026-11-28T01:00:00Z", []))
        self.assertIn("| 210 µs | (not given) | redis-benchmark |", r)
        no_table = DOC.split("<!-- BEGIN latency kv -->")[0]
        _, missing = report.update(no_table, by_group(run_doc("2026-11-28T01:00:00Z", [t])))
        self.assertEqual(missing, ["latency kv"])

    def test_latency_only_target(self):
        lat = {"p50_us": 11.0, "p99_us": 50.0, "p999_us": 120.0}
        t = results.latency_target("kv-lat", "kv", "a page fetch", results.series([], "xfer pages bench", latency=lat),
                                   results.series([], "xfer bench", "xfer bench READ", latency=dict(lat, p50_us=10.0)))
        self.assertAlmostEqual(t["ratio"], 1.1)
        new, _ = report.update(DOC, by_group(run_doc("2026-11-28T01:00:00Z", [t])))
        self.assertNotIn("kv-lat", new.split("<!-- BEGIN latency kv -->")[0])
        self.assertIn("| `kv-lat` | a page fetch | 11.0 µs | 50.0 µs | 120 µs | xfer bench READ | 10.0 µs |", new)

    def test_load_routes_rows(self):
        lat = {"p50_us": 11.0, "p99_us": 50.0, "p999_us": 120.0}
        only = results.latency_target("kv-lat", "kv", "a page fetch", results.series([], "x", latency=lat))
        both = kv_get_c16((40.5, 210.0, 1500.0), (80.0, 2263.0, 4207.0))
        plain = tcp_write(4e9, 2e9)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "kv.json")
            with open(p, "w") as f:
                json.dump(run_doc("2026-11-28T01:00:00Z", [only, both, plain]), f)
            got = report.load([p])
        self.assertEqual({k: sorted(v) for k, v in got.items()},
                         {"current kv": ["kv-tcp-get-4k-c16"], "latency kv": ["kv-lat", "kv-tcp-get-4k-c16"],
                          "current tcp-shm": ["tcp-write-1m"]})


if __name__ == "__main__":
    unittest.main()
