"""Mooncake's own transfer-engine wheel tests, in our words, on xfer.

Run the way Mooncake's CI runs them: Mooncake's HTTP metadata server on a
port (here `xfer mooncake metadata-server`), a target process and an
initiator, both given MC_METADATA_SERVER and a segment name of their own.
The initiator's checks follow those of Mooncake's
transfer_engine_initiator_test.py: random strings written to the target
and read back, one at a time, in synchronous batches and in asynchronous
ones. Then the checks of test_http_metadata_server.py (the server's
protocol, here over HTTP), test_batch_register_memory.py and
test_allocate_host_buffer.py. docs/MOONCAKE.md names the commits read."""

import ctypes
import os
import random
import string
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from xfer.mooncake import engine as mce
from xfer.mooncake.engine import TransferEngine

BANNER = "xfer mooncake metadata-server: listening on "

# Rounds of the one-at-a-time check (Mooncake's CIRCLE; its default 1000
# runs in a few seconds here too, but the suite keeps to less).
CIRCLE = int(os.environ.get("CIRCLE", "200"))
BUFFER = 1 << 20

# The target, as Mooncake's transfer_engine_target.py: initialize with the
# metadata server and a segment name from the environment, then serve until
# told to stop. Mooncake's older binding allocated a buffer inside
# initialize, which the initiator finds with get_first_buffer_address;
# today's does not, so the target allocates one itself.
TARGET = r"""
import os, sys
from xfer.mooncake.engine import TransferEngine
te = TransferEngine()
ret = te.initialize(os.environ["TARGET_SERVER_NAME"], os.environ["MC_METADATA_SERVER"],
                    os.environ.get("PROTOCOL", "tcp"), "")
assert ret == 0, (ret, te.last_error)
assert te.allocate_managed_buffer(%d), te.last_error
print("ready", flush=True)
sys.stdin.read()
te.close()
""" % BUFFER


def start_metadata_server(go_xfer, env=None):
    p = subprocess.Popen([go_xfer, "mooncake", "metadata-server", "--host", "127.0.0.1", "--port", "0"],
                         stdout=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    assert line.startswith(BANNER), "metadata-server did not start: %r" % line
    return p, "http://%s/metadata" % line[len(BANNER):].strip()


def stop(p):
    if p.poll() is None:
        p.terminate()
        p.wait(timeout=30)


@pytest.fixture(scope="module")
def metadata_server(go_xfer):
    p, url = start_metadata_server(go_xfer)
    yield url
    stop(p)


class Target:
    def __init__(self, name, metadata):
        env = dict(os.environ, TARGET_SERVER_NAME=name, MC_METADATA_SERVER=metadata, PROTOCOL="tcp")
        self.p = subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        assert self.p.stdout.readline().strip() == "ready", "the target did not initialize"

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=30)


def random_bytes(n):
    chars = string.ascii_letters + string.digits + string.punctuation
    return "".join(random.choices(chars, k=n)).encode()


@pytest.fixture(scope="module")
def session(metadata_server):
    """A target process and this process's initiator, named as Mooncake's
    tests name them (TARGET_SERVER_NAME, INITIATOR_SERVER_NAME), finding
    each other through the metadata server in MC_METADATA_SERVER."""
    target_name = os.environ.get("TARGET_SERVER_NAME", "127.0.0.1:12345")
    initiator_name = os.environ.get("INITIATOR_SERVER_NAME", "127.0.0.1:12347")
    target = Target(target_name, metadata_server)
    init = TransferEngine()
    assert init.initialize(initiator_name, metadata_server, "tcp", "") == 0, init.last_error
    assert init.allocate_managed_buffer(BUFFER), init.last_error
    yield init, initiator_name, target_name
    init.close()
    target.close()


@pytest.fixture(autouse=True)
def bind_loopback(monkeypatch):
    """Segment names that are not addresses (decode-0) listen on loopback,
    whatever interfaces this host has."""
    monkeypatch.setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    monkeypatch.delenv("XFER_SECRET", raising=False)
    monkeypatch.delenv("XFER_SECRET_FILE", raising=False)
    monkeypatch.delenv("MC_METADATA_HTTP_TOKEN", raising=False)


def test_first_buffers(session):
    init, me, target = session
    mine, theirs = init.get_first_buffer_address(me), init.get_first_buffer_address(target)
    assert mine and theirs and mine != theirs, (mine, theirs, init.last_error)


def test_random_write_read_rounds(session):
    init, me, target = session
    src = init.get_first_buffer_address(me)
    dst = init.get_first_buffer_address(target)
    for i in range(CIRCLE):
        data = random_bytes(random.randint(16, 256))
        n = len(data)
        assert init.write_bytes_to_buffer(src, data, n) == 0, (i, init.last_error)
        assert init.transfer_sync_write(target, src, dst, n) == 0, (i, init.last_error)
        assert init.write_bytes_to_buffer(src, bytes(n), n) == 0
        assert init.transfer_sync_read(target, src, dst, n) == 0, (i, init.last_error)
        assert init.read_bytes_from_buffer(src, n) == data, i


def batch_round(init, me, target, use_async):
    step, count = 1024, 100
    src0 = init.get_first_buffer_address(me)
    dst0 = init.get_first_buffer_address(target)
    srcs = [src0 + i * step for i in range(count)]
    dsts = [dst0 + i * step for i in range(count)]
    for r in range(max(2, CIRCLE // 100)):
        datas = [random_bytes(random.randint(32, 128)) for _ in range(count)]
        lens = [len(d) for d in datas]
        for a, d in zip(srcs, datas):
            assert init.write_bytes_to_buffer(a, d, len(d)) == 0
        if use_async:
            bid = init.batch_transfer_async_write(target, srcs, dsts, lens)
            assert bid != 0, init.last_error
            assert init.get_batch_transfer_status([bid]) == 0, init.last_error
        else:
            assert init.batch_transfer_sync_write(target, srcs, dsts, lens) == 0, init.last_error
        for a, n in zip(srcs, lens):
            assert init.write_bytes_to_buffer(a, bytes(n), n) == 0
        if use_async:
            bid = init.batch_transfer_async_read(target, srcs, dsts, lens)
            assert bid != 0, init.last_error
            assert init.get_batch_transfer_status([bid]) == 0, init.last_error
        else:
            assert init.batch_transfer_sync_read(target, srcs, dsts, lens) == 0, init.last_error
        for a, d in zip(srcs, datas):
            assert init.read_bytes_from_buffer(a, len(d)) == d, r


def test_batch_sync_write_read(session):
    batch_round(*session, use_async=False)


def test_batch_async_write_read(session):
    batch_round(*session, use_async=True)


def test_unknown_segment(session):
    init, me, _ = session
    src = init.get_first_buffer_address(me)
    assert init.transfer_sync_write("nobody-here", src, 4096, 16) == mce.ERR_METADATA
    assert "nobody-here" in init.last_error


def test_name_in_use(metadata_server):
    """A second engine under a name in use is refused, as Mooncake's
    server refuses a second rpc_meta value; closed, the name is free."""
    a = TransferEngine()
    assert a.initialize("decode-0", metadata_server, "tcp", "") == 0, a.last_error
    b = TransferEngine()
    assert b.initialize("decode-0", metadata_server, "tcp", "") == mce.ERR_METADATA
    assert "decode-0" in b.last_error
    a.close()
    assert b.initialize("decode-0", metadata_server, "tcp", "") == 0, b.last_error
    b.close()


def test_initialize_ext(metadata_server):
    """initialize_ext with the server's type apart, as SGLang passes it."""
    te = TransferEngine()
    assert te.initialize_ext("ext-0", metadata_server, "tcp", "", "http") == 0, te.last_error
    te.close()
    assert te.initialize_ext("ext-1", "127.0.0.1:1", "tcp", "", "etcd") == mce.ERR_METADATA


def test_secret(metadata_server, tmp_path, monkeypatch):
    """XFER_SECRET_FILE (or XFER_SECRET): peers must share the secret."""
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    env = dict(os.environ, XFER_SECRET_FILE=str(secret))
    env.pop("XFER_SECRET", None)
    t = subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(env, TARGET_SERVER_NAME="secret-target", MC_METADATA_SERVER=metadata_server))
    try:
        assert t.stdout.readline().strip() == "ready"
        outsider = TransferEngine()
        assert outsider.initialize("outsider", metadata_server, "tcp", "") == 0
        src = outsider.allocate_managed_buffer(4096)
        assert outsider.transfer_sync_write("secret-target", src, 4096, 16) < 0
        assert "secret" in outsider.last_error or "auth" in outsider.last_error.lower(), outsider.last_error
        outsider.close()
        monkeypatch.setenv("XFER_SECRET", "0123456789abcdef0123456789abcdef")
        insider = TransferEngine()
        assert insider.initialize("insider", metadata_server, "tcp", "") == 0, insider.last_error
        src = insider.allocate_managed_buffer(4096)
        dst = insider.get_first_buffer_address("secret-target")
        assert dst, insider.last_error
        assert insider.write_bytes_to_buffer(src, b"shared", 6) == 0
        assert insider.transfer_sync_write("secret-target", src, dst, 6) == 0, insider.last_error
        assert insider.transfer_sync_read("secret-target", src + 100, dst, 6) == 0
        assert insider.read_bytes_from_buffer(src + 100, 6) == b"shared"
        insider.close()
    finally:
        t.stdin.close()
        t.wait(timeout=30)


def http(method, url, body=None, token=None):
    req = urllib.request.Request(url, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_metadata_server_protocol(metadata_server):
    """The checks of Mooncake's test_http_metadata_server.py, over HTTP:
    a missing or blank key is 400 for every method, a key is trimmed, a
    value round-trips."""
    for method in ("GET", "PUT", "DELETE"):
        assert http(method, metadata_server, b"value" if method == "PUT" else None)[0] == 400
        assert http(method, metadata_server + "?key=", b"value" if method == "PUT" else None)[0] == 400
        assert http(method, metadata_server + "?key=%20%20%20", b"v" if method == "PUT" else None) == \
            (400, b"metadata key is required")
    assert http("PUT", metadata_server + "?key=%20%20valid%20%20", b"value") == (200, b"metadata updated")
    assert http("GET", metadata_server + "?key=valid") == (200, b"value")
    assert http("GET", metadata_server + "?key=%20%20valid%20%20") == (200, b"value")
    assert http("DELETE", metadata_server + "?key=valid") == (200, b"metadata deleted")
    assert http("GET", metadata_server + "?key=valid") == (404, b"metadata not found")
    assert http("POST", metadata_server + "?key=valid", b"x") == (405, b"Method not allowed")


def test_metadata_server_token(go_xfer, monkeypatch):
    """MC_METADATA_HTTP_TOKEN: the server refuses requests without it
    (401), and engines given the same variable send it."""
    p, url = start_metadata_server(go_xfer, env=dict(os.environ, MC_METADATA_HTTP_TOKEN="s3cret-token"))
    try:
        assert http("PUT", url + "?key=k", b"v") == (401, b"unauthorized")
        assert http("PUT", url + "?key=k", b"v", token="s3cret-token")[0] == 200
        te = TransferEngine()
        assert te.initialize("tok-0", url, "tcp", "") == mce.ERR_METADATA
        monkeypatch.setenv("MC_METADATA_HTTP_TOKEN", "s3cret-token")
        assert te.initialize("tok-0", url, "tcp", "") == 0, te.last_error
        te.close()
    finally:
        stop(p)


def test_batch_register_mismatched_lengths():
    """As test_batch_register_memory.py: lists of different lengths are
    -1 and register nothing (the same buffers register afterwards); empty
    lists are 0."""
    te = TransferEngine()
    assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
    try:
        bufs = [ctypes.create_string_buffer(4096) for _ in range(2)]
        addrs = [ctypes.addressof(b) for b in bufs]
        for na, nc in ((1, 0), (2, 1), (1, 2), (0, 1)):
            assert te.batch_register_memory(addrs[:na], [4096] * nc) == -1, (na, nc)
        assert te.batch_register_memory([], []) == 0
        assert te.batch_unregister_memory([]) == 0
        assert te.batch_register_memory(addrs, [4096, 4096]) == 0, te.last_error
        assert te.batch_unregister_memory(addrs) == 0, te.last_error
    finally:
        te.close()


def test_allocate_host_buffer():
    """As test_allocate_host_buffer.py: a buffer round-trips, size 0 is 0,
    freeing 0 does nothing; and (ours) the buffer registers and serves."""
    p = mce.allocate_host_buffer(4 << 20)
    assert p != 0
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        assert te.register_memory(p, 4 << 20) == 0, te.last_error
        assert te.write_bytes_to_buffer(p + 100, b"host", 4) == 0
        assert te.read_bytes_from_buffer(p + 100, 4) == b"host"
        assert te.unregister_memory(p) == 0
    finally:
        te.close()
    mce.free_host_buffer(p)
    assert mce.allocate_host_buffer(0) == 0
    mce.free_host_buffer(0)
    with pytest.raises(ValueError):
        mce.free_host_buffer(p)  # freed already
