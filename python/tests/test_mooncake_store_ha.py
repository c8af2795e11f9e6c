"""xfer.mooncake.store.MooncakeDistributedStore with master_server_addr
"etcd://HOST:PORT", Mooncake's HA spelling: two `xfer mooncake master
--enable_ha=true --etcd_endpoints=...` on Debian's etcd server elect a
leader; the store puts objects, the leader is killed (SIGKILL), and the
store's gets and puts work again within twice the election lease."""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from xfer.mooncake.store import MooncakeDistributedStore

ETCD = shutil.which("etcd") or next((p for p in ("/usr/bin/etcd", "/usr/sbin/etcd") if os.path.exists(p)), None)
pytestmark = pytest.mark.skipif(ETCD is None, reason="no etcd binary: apt-get install etcd-server (tools/deps.sh installs it)")

BANNER = "xfer mooncake master: "
TTL = 2  # --ha_lease_ttl, seconds: etcd's shortest with its default heartbeat
CLUSTER = "py-ha-%d" % os.getpid()
MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd(tmp_path):
    client, peer = "127.0.0.1:%d" % free_port(), "http://127.0.0.1:%d" % free_port()
    log = open(tmp_path / "etcd.log", "w")
    p = subprocess.Popen([ETCD, "--name", "t", "--data-dir", str(tmp_path / "etcd"),
                          "--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", "t=" + peer, "--log-level", "error"], stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen("http://%s/health" % client, timeout=1) as r:
                if b'"health":"true"' in r.read():
                    break
        except OSError:
            pass
        assert p.poll() is None, "etcd exited: %s" % (tmp_path / "etcd.log").read_text()
        assert time.monotonic() < deadline, "etcd did not answer in 30 s"
        time.sleep(0.1)
    yield client
    p.kill()
    p.wait()
    log.close()


class Master:
    def __init__(self, go_xfer, etcd):
        self.p = subprocess.Popen([go_xfer, "mooncake", "master", "--rpc_address", "127.0.0.1", "--port", "0",
                                   "--metrics_port", "0", "--metrics_host", "127.0.0.1", "--enable_metric_reporting=false",
                                   "--enable_ha=true", "--etcd_endpoints", etcd, "--cluster_id", CLUSTER,
                                   "--ha_lease_ttl=%ds" % TTL, "--ha_flush_interval=20ms"],
                                  stdout=subprocess.PIPE, text=True)
        lines = [self.p.stdout.readline() for _ in range(4)]  # listening, metrics, data plane, candidate
        assert lines[0].startswith(BANNER + "listening on "), "master did not start: %r" % lines
        self.addr = lines[0].split()[-1]
        self.metrics = lines[1].split()[-1]
        assert lines[3].startswith(BANNER + "candidate in etcd "), lines

    def leading(self):
        try:
            with urllib.request.urlopen(self.metrics, timeout=2) as r:
                return any(l.strip() == "xfer_mooncake_master_leader 1" for l in r.read().decode().splitlines())
        except OSError:
            return False

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(10)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(10)


@pytest.fixture
def masters(go_xfer, etcd):
    ms = [Master(go_xfer, etcd), Master(go_xfer, etcd)]
    yield ms
    for m in ms:
        m.stop()


def wait_leader(ms, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for m in ms:
            if m.leading():
                return m
        time.sleep(0.05)
    raise AssertionError("no master leads within %s s" % within)


def test_store_follows_the_leader(etcd, masters, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", CLUSTER)  # the masters' --cluster_id, as Mooncake's clients read it
    leader = wait_leader(masters, 10)
    standby = masters[1] if leader is masters[0] else masters[0]
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", "etcd://" + etcd)
    assert rc == 0, (rc, s.last_error)
    try:
        values = {"ha-%d" % i: os.urandom(1000 + i) for i in range(20)}
        for k, v in values.items():
            assert s.put(k, v) == 0, s.last_error
        time.sleep(0.3)  # several write-behind intervals: the objects are in etcd

        start = time.monotonic()
        leader.kill()
        # Gets fail (RPC_FAIL) until the standby leads and the store follows it.
        while True:
            got = s.get("ha-0")
            if got == values["ha-0"]:
                break
            assert time.monotonic() - start < 2 * TTL, "no get served within %d s of the leader's kill: %s" % (2 * TTL, s.last_error)
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        print("failover: gets served again %.2f s after the leader was killed" % elapsed)
        assert standby.leading()
        for k, v in values.items():
            assert s.get(k) == v, k
        assert s.put("after", b"x" * 4096) == 0, s.last_error
        assert s.get("after") == b"x" * 4096
        assert s.is_exist("ha-19") == 1
    finally:
        s.close()
