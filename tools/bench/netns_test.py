#!/usr/bin/env python3
"""Tests of netns.py's names and options: python3 -m unittest discover -s tools/bench -p '*_test.py'.

Making the link itself needs root; peers.py --netns and kv.py --netns do."""
import os
import unittest
from unittest import mock

import netns
import peers


class DelayTest(unittest.TestCase):
    def test_parse(self):
        for d in ("50us", "0.2ms", "1ms"):
            self.assertEqual(netns.parse_delay(d), d)
        for d in ("", "50", "50 us", "-1ms", "0us", "1s", "us"):
            with self.assertRaises(ValueError, msg=d):
                netns.parse_delay(d)

    def test_suffix(self):
        self.assertEqual(netns.suffix(), "-netns")
        self.assertEqual(netns.suffix("50us"), "-netns-50us")


class CheckTest(unittest.TestCase):
    def test_not_root(self):
        with mock.patch.object(os, "geteuid", return_value=1000):
            with self.assertRaisesRegex(netns.Error, "needs root"):
                netns.check()

    def test_no_ip(self):
        with mock.patch.object(os, "geteuid", return_value=0), mock.patch.object(netns.shutil, "which",
                                                                                  return_value=None):
            with self.assertRaisesRegex(netns.Error, "iproute2's ip"):
                netns.check()


class LinkTest(unittest.TestCase):
    def test_names(self):
        link = netns.Link()
        # Interface names hold at most 15 characters; pids reach 7 digits.
        self.assertLessEqual(len(link.server_if.replace(str(os.getpid()), "4194304")), 15)
        self.assertEqual(link.client(["iperf3", "-c", link.server_addr])[:4],
                         ["ip", "netns", "exec", link.client_ns])
        self.assertTrue(netns.NS_RE.match(link.server_ns) and netns.NS_RE.match(link.client_ns))

    def test_peers_commands(self):
        """In netns mode the clients dial the server's namespace; on loopback, 127.0.0.1."""
        self.assertEqual(peers.qperf_cmd(19302, "3")[1], "127.0.0.1")
        self.assertNotIn("--peer", peers.xfer_args("tcp", "write", "1MiB", 4, "3"))
        link = netns.Link()
        saved = peers.LINK, peers.HOST
        peers.LINK, peers.HOST = link, link.server_addr
        try:
            self.assertEqual(peers.qperf_cmd(19302, "3")[1], netns.SERVER_ADDR)
            args = peers.xfer_args("tcp", "write", "1MiB", 4, "3")
            self.assertEqual(args[args.index("--peer") + 1], f"{netns.SERVER_ADDR}:{peers.XFER_SERVE_PORT}")
            self.assertEqual(peers.server(["qperf"])[:4], ["ip", "netns", "exec", link.server_ns])
            self.assertIn(f"{netns.SERVER_ADDR}:{peers.XFER_SERVE_PORT}", peers.xfer_serve_args("xfer"))
        finally:
            peers.LINK, peers.HOST = saved


if __name__ == "__main__":
    unittest.main()
