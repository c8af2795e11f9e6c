#!/usr/bin/env python3
"""Tests of verbs.py's parsing: python3 -m unittest discover -s tools/bench -p '*_test.py'."""
import json
import os
import tempfile
import unittest

import verbs

# ib_write_lat -d rxe0 -x 1 -s 8 -n 1000, the client's result lines.
IB_WRITE_LAT = """---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       1000          6.93           61.02        8.01               8.65             2.10            17.05                  40.13  
---------------------------------------------------------------------------------------
"""


class LatencyTest(unittest.TestCase):
    def test_rtt_latency_target(self):
        with tempfile.TemporaryDirectory() as d:
            for r, (lat, x) in enumerate([(IB_WRITE_LAT, (20000, 40000, 90000)),
                                          (IB_WRITE_LAT.replace("40.13", "50.13"), (22000, 44000, 70000))], 1):
                with open(os.path.join(d, f"r{r}-ib_write_lat"), "w") as f:
                    f.write(lat)
                with open(os.path.join(d, f"r{r}-xfer_write_8"), "w") as f:
                    f.write(json.dumps({"transport": "rdma", "lat_p50_ns": x[0], "lat_p99_ns": x[1],
                                        "lat_p999_ns": x[2]}) + "\n")
            errors, notes = [], []
            series = verbs.parse(d, errors, notes)
        self.assertEqual(errors, [])
        ts = {t["id"]: t for t in verbs.targets_of(series, {}, "rxe0", False)}
        t = ts["rdma-rxe-write-8-rtt"]
        self.assertEqual(t["table"], "latency")
        self.assertEqual(t["xfer"]["latency"], {"p50_us": 21.0, "p99_us": 42.0, "p999_us": 80.0})
        # perftest's half round trips, doubled; the medians of the two rounds.
        self.assertEqual(t["peer"]["latency"], {"p50_us": 16.02, "p99_us": 34.1, "p999_us": 90.26})
        self.assertAlmostEqual(ts["rdma-rxe-write-8-rtt-p50"]["xfer"]["median"], 21.0)

    def test_siw_against_read(self):
        # On siw the round trip is also set against ib_read_lat's, not
        # doubled: a READ's round trip is what an iWARP WRITE waits for.
        with tempfile.TemporaryDirectory() as d:
            for r, (rd, x) in enumerate([("8.01", (20000, 40000)), ("10.01", (26000, 44000))], 1):
                with open(os.path.join(d, f"r{r}-ib_write_lat"), "w") as f:
                    f.write(IB_WRITE_LAT)
                with open(os.path.join(d, f"r{r}-ib_read_lat"), "w") as f:
                    f.write(IB_WRITE_LAT.replace("8.01  ", rd + "  "))
                with open(os.path.join(d, f"r{r}-xfer_write_8"), "w") as f:
                    f.write(json.dumps({"transport": "rdma", "lat_p50_ns": x[0], "lat_p99_ns": x[1]}) + "\n")
                with open(os.path.join(d, f"r{r}-xfer_read_8_d1"), "w") as f:
                    f.write(json.dumps({"transport": "rdma", "lat_p50_ns": x[0] // 2, "lat_p99_ns": x[1] // 2}) + "\n")
            errors, notes = [], []
            series = verbs.parse(d, errors, notes)
            self.assertEqual(errors, [])
            ts = {t["id"]: t for t in verbs.targets_of(series, {}, "siw0", False)}
        t = ts["rdma-siw-write-8-rtt-p50-vs-read"]
        self.assertAlmostEqual(t["xfer"]["median"], 23.0)
        self.assertAlmostEqual(t["peer"]["median"], 9.01)
        self.assertIsNone(t.get("goal"))
        self.assertAlmostEqual(ts["rdma-siw-write-8-rtt-p99-vs-read"]["peer"]["median"], 17.05)
        # xfer's own READ against the same perftest READ.
        t = ts["rdma-siw-read-8-rtt-p50"]
        self.assertAlmostEqual(t["xfer"]["median"], 11.5)
        self.assertAlmostEqual(t["peer"]["median"], 9.01)
        self.assertAlmostEqual(ts["rdma-siw-read-8-rtt-p99"]["xfer"]["median"], 21.0)
        # And in the latency table, against perftest's READ, not doubled.
        t = ts["rdma-siw-read-8-rtt"]
        self.assertEqual(t["table"], "latency")
        self.assertEqual(t["xfer"]["latency"]["p50_us"], 11.5)
        self.assertEqual(t["peer"]["latency"], {"p50_us": 9.01, "p99_us": 17.05, "p999_us": 40.13})
        # ib_write_lat's rows are unchanged beside them.
        self.assertAlmostEqual(ts["rdma-siw-write-8-rtt-p50"]["peer"]["median"], 16.02)
        # No ib_read_lat, no such rows (rxe).
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "r1-ib_write_lat"), "w") as f:
                f.write(IB_WRITE_LAT)
            with open(os.path.join(d, "r1-xfer_write_8"), "w") as f:
                f.write(json.dumps({"transport": "rdma", "lat_p50_ns": 1, "lat_p99_ns": 2}) + "\n")
            series = verbs.parse(d, [], [])
        self.assertFalse([t for t in verbs.targets_of(series, {}, "rxe0", False) if "read-8" in t["id"] or "vs-read" in t["id"]])


if __name__ == "__main__":
    unittest.main()
