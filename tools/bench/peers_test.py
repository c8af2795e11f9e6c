#!/usr/bin/env python3
"""Tests of peers.py's parsing: python3 -m unittest discover -s tools/bench -p '*_test.py'."""
import unittest

import peers

# sockperf 3.7: pp --tcp -i 127.0.0.1 -p P -m 64 -t 2 --full-rtt, as printed
# (with its colour escapes).
SOCKPERF = """sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=256736; ReceivedMessages=256736
sockperf: \x1b[2;35m====> avg-rtt=6.007 (std-dev=33.277)\x1b[0m
sockperf: Summary: Round trip is 6.007 usec
sockperf: \x1b[2;35mTotal 256736 observations\x1b[0m; each percentile contains 2567.36 observations
sockperf: ---> <MAX> observation = 5274.298
sockperf: ---> percentile 99.999 = 3376.518
sockperf: ---> percentile 99.990 = 2207.690
sockperf: ---> percentile 99.900 =   61.212
sockperf: ---> percentile 99.000 =   12.226
sockperf: ---> percentile 90.000 =    6.212
sockperf: ---> percentile 75.000 =    5.013
sockperf: ---> percentile 50.000 =    4.793
sockperf: ---> percentile 25.000 =    4.669
sockperf: ---> <MIN> observation =    4.216
"""


class SockperfTest(unittest.TestCase):
    def test_percentiles(self):
        self.assertEqual(peers.parse_sockperf(SOCKPERF), {"p50_us": 4.793, "p99_us": 12.226, "p999_us": 61.212})

    def test_missing_percentile(self):
        with self.assertRaises(ValueError):
            peers.parse_sockperf(SOCKPERF.replace("percentile 99.900", "percentile 99.800"))
        with self.assertRaises(ValueError):
            peers.parse_sockperf("sockperf: Summary: Round trip is 6.007 usec\n")

    def test_xfer_latency(self):
        self.assertEqual(peers.lat_of({"lat_p50_ns": 15700, "lat_p99_ns": 40000, "lat_p999_ns": 90000}),
                         {"p50_us": 15.7, "p99_us": 40.0, "p999_us": 90.0})
        self.assertIsNone(peers.lat_of({"lat_p50_ns": 1, "lat_p99_ns": 2})["p999_us"])


if __name__ == "__main__":
    unittest.main()
