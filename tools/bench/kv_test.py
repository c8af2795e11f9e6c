#!/usr/bin/env python3
"""Tests of kv.py's parsing: python3 -m unittest discover -s tools/bench -p '*_test.py'."""
import unittest

import kv

# redis-benchmark 7.0.15 -p P -t get -d 4096 -c 16 -n 20000 --precision 3, as
# it came (the progress lines end in carriage returns), the cumulative
# distribution shortened.
SAMPLE = (
    "\rGET: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r"
    "                                                           \r"
    "GET: rps=74450.2 (overall: 74450.2) avg_msec=0.134 (overall: 0.134)\r"
    "                                                                    \r"
    """====== GET ======
  20000 requests completed in 0.27 seconds
  16 parallel clients
  4096 bytes payload
  keep alive: 1
  host configuration "save": 
  host configuration "appendonly": no
  multi-thread: no

Latency by percentile distribution:
0.000% <= 0.023 milliseconds (cumulative count 3)
50.000% <= 0.079 milliseconds (cumulative count 10666)
75.000% <= 0.103 milliseconds (cumulative count 16102)
87.500% <= 0.119 milliseconds (cumulative count 18079)
93.750% <= 0.151 milliseconds (cumulative count 18811)
96.875% <= 0.247 milliseconds (cumulative count 19386)
98.438% <= 1.615 milliseconds (cumulative count 19688)
99.219% <= 2.671 milliseconds (cumulative count 19845)
99.609% <= 3.711 milliseconds (cumulative count 19922)
99.805% <= 3.983 milliseconds (cumulative count 19962)
99.902% <= 4.207 milliseconds (cumulative count 19982)
99.951% <= 5.023 milliseconds (cumulative count 19992)
99.976% <= 5.039 milliseconds (cumulative count 19996)
99.988% <= 5.055 milliseconds (cumulative count 19999)
99.997% <= 5.063 milliseconds (cumulative count 20000)
100.000% <= 5.063 milliseconds (cumulative count 20000)

Cumulative distribution of latencies:
80.510% <= 0.103 milliseconds (cumulative count 16102)
99.850% <= 4.103 milliseconds (cumulative count 19970)
100.000% <= 5.103 milliseconds (cumulative count 20000)

Summary:
  throughput summary: 73529.41 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.134     0.016     0.079     0.175     2.263     5.063
""")

CSV = '''"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"GET","73529.41","0.134","0.016","0.079","0.175","2.263","5.063"
'''


class RedisBenchmarkTest(unittest.TestCase):
    def test_full_output(self):
        r = kv.parse_redis_benchmark(SAMPLE)
        self.assertAlmostEqual(r["ops_per_sec"], 73529.41)
        self.assertAlmostEqual(r["p50_us"], 79.0)
        self.assertAlmostEqual(r["p99_us"], 2263.0)
        # 99.9% of 20,000 is 19,980: first reached at the 99.902% step.
        self.assertAlmostEqual(r["p999_us"], 4207.0)

    def test_newlines_only(self):
        # Python's text mode turns the carriage returns into newlines.
        r = kv.parse_redis_benchmark(SAMPLE.replace("\r", "\n"))
        self.assertAlmostEqual(r["p999_us"], 4207.0)

    def test_p999_on_a_step_edge(self):
        # A step whose count is exactly 99.9% of the requests is the 99.9th percentile.
        edge = SAMPLE.replace("(cumulative count 19962)", "(cumulative count 19980)")
        self.assertAlmostEqual(kv.parse_redis_benchmark(edge)["p999_us"], 3983.0)

    def test_incomplete_outputs(self):
        for name, out in [
            ("csv", CSV),
            ("quiet", "GET: 73529.41 requests per second, p50=0.079 msec\n"),
            ("no distribution", SAMPLE.split("Latency by percentile")[0] + SAMPLE.split("Cumulative distribution")[1]),
            ("distribution cut short", SAMPLE.replace("99.902% <= 4.207", "cut").replace("99.951%", "cut")),
            ("no request count", SAMPLE.replace("20000 requests completed", "requests completed")),
            ("no p99", SAMPLE.replace("p99 ", "p98 ")),
            ("summary columns differ", SAMPLE.replace("0.175     2.263", "0.175")),
        ]:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    kv.parse_redis_benchmark(out)



class PingpongTest(unittest.TestCase):
    def test_line(self):
        r = kv.parse_pingpong("c1 1MiB ping-pong: 7947 ops/s 8.33 GB/s p50 119 us p99 161 us p99.9 2708 us\n")
        self.assertEqual(r, {"ops_per_sec": 7947.0, "bytes_per_sec": 7947.0 * (1 << 20), "p50_us": 119.0,
                             "p99_us": 161.0, "p999_us": 2708.0})

    def test_no_line(self):
        for out in ("", "TCP_CONGESTION: No such file or directory\n",
                    "c1 1MiB ping-pong: 7947 ops/s 8.33 GB/s p50 119 us p99 161 us\n"):
            with self.subTest(out), self.assertRaises(ValueError):
                kv.parse_pingpong(out)


if __name__ == "__main__":
    unittest.main()
