"""xfer.mooncake.store.MooncakeDistributedStore against a real
`xfer mooncake master`, on tcp and shm: every call of the store's data
API, its leases, replicas and removal, and its refusals of bad input."""

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest

from xfer.mooncake import store as mcs
from xfer.mooncake.store import MooncakeDistributedStore, ReplicateConfig

BANNER = "xfer mooncake master: listening on "
LEASE_MS = 300
MiB = 1 << 20


class Master:
    def __init__(self, go_xfer, *flags):
        self.p = subprocess.Popen([go_xfer, "mooncake", "master", "--rpc_address", "127.0.0.1", "--port", "0",
                                   "--metrics_port", "0", "--default_kv_lease_ttl=%d" % LEASE_MS, *flags],
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith(BANNER), "master did not start: %r" % line
        self.addr = line[len(BANNER):].split()[0].strip()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(10)


@pytest.fixture(scope="module")
def master(go_xfer):
    m = Master(go_xfer)
    yield m
    m.stop()


def client(master, protocol="tcp", segment=64 * MiB, local=16 * MiB, host="127.0.0.1"):
    s = MooncakeDistributedStore()
    rc = s.setup(host, "P2PHANDSHAKE", segment, local, protocol, "", master.addr)
    assert rc == 0, (rc, s.last_error)
    return s


@pytest.fixture(params=["tcp", "shm"])
def pair(request, master):
    """Two clients of one master: objects one puts may live in the other's segment."""
    a, b = client(master, request.param), client(master, request.param)
    yield a, b
    b.close()
    a.close()


def lease():
    time.sleep(LEASE_MS / 1000 + 0.1)


def key(name):
    return "%s-%d-%d" % (name, os.getpid(), time.monotonic_ns())


def test_install_as_mooncake():
    import xfer.mooncake
    saved = {k: sys.modules.get(k) for k in ("mooncake", "mooncake.engine", "mooncake.store")}
    try:
        xfer.mooncake.install_as_mooncake()
        from mooncake.store import MooncakeDistributedStore as M, ReplicateConfig as R, SoftPinAction
        assert M is MooncakeDistributedStore and R is ReplicateConfig
        assert SoftPinAction.ENABLE == 1
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def test_put_get_remove(pair):
    a, b = pair
    k = key("basic")
    value = os.urandom(100_000)
    assert a.put(k, value) == 0
    assert a.get_size(k) == len(value)
    assert b.get(k) == value and a.get(k) == value
    assert a.is_exist(k) == 1
    assert a.put(k, b"other") == 0  # an existing key keeps its value
    assert b.get(k) == value
    assert a.remove(k) == mcs.OBJECT_HAS_LEASE  # just read: leased
    lease()
    assert a.remove(k) == 0
    assert a.is_exist(k) == 0
    assert a.get(k) == b""
    assert a.get_size(k) == mcs.OBJECT_NOT_FOUND
    assert a.remove(k) == mcs.OBJECT_NOT_FOUND


def test_upsert_and_force(pair):
    a, b = pair
    k = key("upsert")
    assert a.put(k, b"first") == 0
    assert a.upsert(k, b"second, longer") == 0
    assert b.get(k) == b"second, longer"
    assert a.remove(k, force=True) == 0
    assert b.is_exist(k) == 0


def test_batches(pair):
    a, b = pair
    ks = [key("batch%d" % i) for i in range(5)]
    vals = [os.urandom(1000 * (i + 1)) for i in range(5)]
    assert a.put_batch(ks, vals) == 0
    assert b.get_batch(ks) == vals
    assert b.batch_is_exist(ks + [key("absent")]) == [1] * 5 + [0]
    assert a.batch_is_exist([]) == []
    bufs = b.batch_get_buffer(ks + [key("absent")])
    assert [bytes(x) for x in bufs[:5]] == vals and bufs[5] is None
    assert bufs[0].size() == len(vals[0]) and bufs[0].ptr() != 0
    del bufs
    assert a.put_parts(ks[0] + "p", b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert a.get(ks[0] + "p") == b"abcdef"
    lease()
    assert a.batch_remove(ks) == [0] * 5


def test_put_from_get_into(pair):
    a, b = pair
    n = 3 * 64 * 1024
    src = (ctypes.c_ubyte * n)()
    dst = (ctypes.c_ubyte * n)()
    data = os.urandom(n)
    ctypes.memmove(src, data, n)
    assert a.register_buffer(ctypes.addressof(src), n) == 0
    assert b.register_buffer(ctypes.addressof(dst), n) == 0
    k = key("zerocopy")
    assert a.put_from(k, ctypes.addressof(src), n) == 0
    assert b.get_into(k, ctypes.addressof(dst), n) == n
    assert bytes(dst) == data
    # Too small a buffer: a code, and nothing written past it.
    assert b.get_into(k, ctypes.addressof(dst), n // 2) < 0
    # Memory that is not registered: refused.
    other = (ctypes.c_ubyte * 64)()
    assert a.put_from(key("unreg"), ctypes.addressof(other), 64) == mcs.INVALID_PARAMS
    assert b.get_into(k, ctypes.addressof(other), 64) == mcs.INVALID_PARAMS
    # Batches, each value a third of the buffer.
    third = n // 3
    ks = [key("bz%d" % i) for i in range(3)]
    ptrs = [ctypes.addressof(src) + i * third for i in range(3)]
    assert a.batch_put_from(ks, ptrs, [third] * 3) == [0, 0, 0]
    ctypes.memset(dst, 0, n)
    got = b.batch_get_into(ks, [ctypes.addressof(dst) + i * third for i in range(3)], [third] * 3)
    assert got == [third] * 3 and bytes(dst) == data
    assert a.batch_put_from(ks[:2], ptrs, [third] * 3) == [mcs.INVALID_PARAMS] * 2
    assert b.batch_get_into([], [], []) == []
    assert a.unregister_buffer(ctypes.addressof(src)) == 0
    assert a.unregister_buffer(ctypes.addressof(src)) < 0
    assert b.unregister_buffer(ctypes.addressof(dst)) == 0


def test_get_into_ranges(pair):
    a, b = pair
    k1, k2 = key("r1"), key("r2")
    d1, d2 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz0123456789"
    assert a.put(k1, d1) == 0 and a.put(k2, d2) == 0
    buf = (ctypes.c_ubyte * 32)()
    p = ctypes.addressof(buf)
    assert b.register_buffer(p, 32) == 0
    ctypes.memset(buf, ord("_"), 32)
    got = b.get_into_ranges([p], [[k1, k2]], [[[0, 20], [8]]], [[[1, 30], [2]]], [[[4, 3], [5]]])
    assert got == [[[4, 3], [5]]]
    assert bytes(buf[0:4]) == d1[1:5] and bytes(buf[20:23]) == d1[30:33] and bytes(buf[8:13]) == d2[2:7]
    assert b.get_into_ranges([p], [[k1]], [[[0]]], [[[len(d1) - 1]]], [[[4]]])[0][0][0] < 0  # past the value
    assert b.get_into_ranges([p], [[k1]], [[[31]]], [[[0]]], [[[4]]])[0][0][0] < 0  # past the buffer
    got = b.get_into_ranges([p], [[key("absent"), k1]], [[[0], [8]]], [[[0], [0]]], [[[4], [4]]])
    assert got[0][0][0] < 0 and got[0][1][0] == 4
    assert b.unregister_buffer(p) == 0


def test_remove_by_regex_and_all(master):
    s = client(master)
    try:
        tag = "rx%d" % os.getpid()
        for i in range(4):
            assert s.put("%s-a-%d" % (tag, i), b"x" * 10) == 0
        assert s.put(tag + "-b", b"y") == 0
        assert s.get("%s-a-0" % tag) == b"x" * 10  # a read leases it: removal skips it
        assert s.remove_by_regex("^" + tag + "-a-") == 3
        lease()
        assert s.remove_by_regex("^" + tag + "-a-") == 1
        assert s.is_exist(tag + "-b") == 1
        assert s.remove_by_regex("(") == mcs.INVALID_PARAMS
        assert s.remove_all(force=True) >= 1
        assert s.is_exist(tag + "-b") == 0
    finally:
        s.close()


def test_replicas_survive_a_closed_client(master):
    a, b = client(master), client(master)
    try:
        k = key("replicated")
        cfg = ReplicateConfig()
        cfg.replica_num = 2
        assert a.put(k, b"kept twice", config=cfg) == 0
        assert a.close() == 0
        assert b.get(k) == b"kept twice"
        a = client(master)
        assert a.get(k) == b"kept twice"
    finally:
        a.close()
        b.close()


def test_closed_client_takes_its_objects(master):
    s = client(master)
    k = key("only")
    cfg = ReplicateConfig()
    cfg.preferred_segment = s.get_hostname()
    assert s.put(k, b"gone with its segment", config=cfg) == 0
    assert s.close() == 0
    other = client(master)
    try:
        assert other.get(k) == b""
        assert other.is_exist(k) == 0
    finally:
        other.close()


def test_killed_client_leaves_lookups(master, go_xfer, tmp_path):
    """A client killed with SIGKILL: its objects leave lookups within the
    master's client TTL; objects with a replica elsewhere keep serving."""
    m = Master(go_xfer, "--client_ttl=1")
    try:
        survivor = client(m)
        script = tmp_path / "victim.py"
        script.write_text(
            "import sys\n"
            "from xfer.mooncake.store import MooncakeDistributedStore, ReplicateConfig\n"
            "s = MooncakeDistributedStore()\n"
            "assert s.setup('127.0.0.1', 'P2PHANDSHAKE', 16 << 20, 16 << 20, 'tcp', '', sys.argv[1]) == 0\n"
            "c = ReplicateConfig(); c.preferred_segment = s.get_hostname()\n"
            "assert s.put('victim-only', b'v' * 100, config=c) == 0\n"
            "c2 = ReplicateConfig(); c2.replica_num = 2\n"
            "assert s.put('victim-both', b'w' * 100, config=c2) == 0\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
        v = subprocess.Popen([sys.executable, str(script), m.addr], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        assert v.stdout.readline().strip() == "ready"
        assert survivor.get("victim-only") == b"v" * 100
        v.kill()
        v.wait()
        deadline = time.monotonic() + 5
        while survivor.is_exist("victim-only") == 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert survivor.is_exist("victim-only") == 0
        assert survivor.get("victim-both") == b"w" * 100
        survivor.close()
    finally:
        m.stop()


def test_no_space(master):
    s = client(master, segment=1 * MiB, local=4 * MiB)
    other = client(master, segment=1 * MiB, local=4 * MiB)
    try:
        cfg = ReplicateConfig()
        cfg.preferred_segment = s.get_hostname()
        # More than any segment holds: no place, and nothing stored.
        assert s.put(key("huge"), b"z" * (2 * MiB)) == mcs.NO_AVAILABLE_HANDLE
    finally:
        other.close()
        s.close()


def test_zero_local_buffer(master):
    s = client(master, local=0)
    try:
        k = key("nolocal")
        assert s.put(k, b"needs staging") != 0
        assert s.is_exist(k) == 0
    finally:
        s.close()


def test_bad_input(master):
    s = client(master)
    try:
        assert s.put("", b"x") == mcs.INVALID_KEY
        assert s.put("k" * 5000, b"x") == mcs.INVALID_KEY
        assert s.put(key("empty"), b"") == mcs.INVALID_PARAMS
        cfg = ReplicateConfig()
        cfg.replica_num = 0
        with pytest.raises(ValueError):
            s.put(key("cfg"), b"x", config=cfg)
        assert s.put_from(key("neg"), 0, -5) == mcs.INVALID_PARAMS
        assert s.get("") == b"" and s.last_error
        assert s.register_buffer(0, 16) < 0
        with pytest.raises(TypeError):
            s.put(key_arg_name_error="k", value=b"x")
    finally:
        s.close()


def test_setup_forms_and_refusals(master):
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": "16MB",
                    "local_buffer_size": "16 MB", "protocol": "tcp", "master_server_addr": master.addr}) == 0
    assert s.put(key("dict"), b"v") == 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 1, 1, "tcp", "", master.addr) == mcs.INVALID_PARAMS  # twice
    assert s.close() == 0 and s.close() == 0
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": "50%", "master_server_addr": master.addr}) != 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "nvlink", "", master.addr) != 0
    # No master there: a code within the call's timeout, not a hang.
    t = time.monotonic()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", "127.0.0.1:1") == mcs.RPC_FAIL
    assert time.monotonic() - t < 15
    assert s.put("k", b"v") == mcs.INVALID_PARAMS  # not set up


def test_hostname_port_range(master):
    s = client(master, host="localhost")
    try:
        host, port = s.get_hostname().rsplit(":", 1)
        assert host == "localhost" and 12300 <= int(port) <= 14300
    finally:
        s.close()


def test_master_stopped_and_restarted(go_xfer):
    m = Master(go_xfer)
    s = client(m)
    try:
        k = key("restart")
        assert s.put(k, b"before") == 0
        m.p.send_signal(signal.SIGSTOP)  # paused: calls fail within the op timeout
        try:
            t = time.monotonic()
            assert s.is_exist(k) == mcs.RPC_FAIL
            assert time.monotonic() - t < 15
        finally:
            m.p.send_signal(signal.SIGCONT)
        port = m.addr.rsplit(":", 1)[1]
        m.stop()
        m2 = subprocess.Popen([go_xfer, "mooncake", "master", "--rpc_address", "127.0.0.1", "--port", port,
                               "--metrics_port", "0"], stdout=subprocess.PIPE, text=True)
        try:
            assert m2.stdout.readline().startswith(BANNER)
            # A restarted master forgot every object; the client mounts again
            # on its next ping, and puts work once it has.
            deadline = time.monotonic() + 5
            rc = None
            while time.monotonic() < deadline:
                rc = s.put(k, b"after")
                if rc == 0:
                    break
                time.sleep(0.2)
            assert rc == 0, s.last_error
            assert s.get(k) == b"after"
        finally:
            m2.send_signal(signal.SIGTERM)
            m2.wait(10)
    finally:
        s.close()


def test_concurrent_threads(master):
    import threading
    s = client(master, segment=128 * MiB, local=64 * MiB)
    errors = []

    def worker(i):
        try:
            v = os.urandom(MiB)
            ks = [key("t%d-%d" % (i, j)) for j in range(8)]
            for k in ks:
                assert s.put(k, v) == 0, s.last_error
            for k in ks:
                assert s.get(k) == v
        except AssertionError as e:
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s.close()
    assert not errors, errors
