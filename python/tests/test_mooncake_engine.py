"""xfer.mooncake.engine: Mooncake's TransferEngine over xfer, between a
target process and this one (the initiator) over tcp on loopback: every
call, its return values and its error codes, as Mooncake's binding has
them."""

import ctypes
import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import xfer.mooncake
from xfer.mooncake import engine as mce
from xfer.mooncake.engine import TransferEngine

MiB = 1 << 20

# The target: registers a numpy array, a ctypes buffer and a managed
# buffer, prints its segment and their addresses, then serves commands on
# stdin (one JSON object a line) to inspect or change its memory.
TARGET = r"""
import ctypes, json, sys
import numpy as np
from xfer.mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
managed = te.allocate_managed_buffer(1 << 16)
arr = np.zeros(1 << 20, dtype=np.uint8)
cbuf = ctypes.create_string_buffer(1 << 16)
assert managed and te.register_memory(arr.ctypes.data, arr.nbytes) == 0, te.last_error
assert te.batch_register_memory([ctypes.addressof(cbuf)], [len(cbuf)]) == 0, te.last_error
spare = np.zeros(4096, dtype=np.uint8)
print(json.dumps({"segment": "127.0.0.1:%d" % te.get_rpc_port(), "managed": managed, "arr": arr.ctypes.data,
                  "cbuf": ctypes.addressof(cbuf), "spare": spare.ctypes.data}), flush=True)
for line in sys.stdin:
    c = json.loads(line)
    if c["op"] == "read":
        r = te.read_bytes_from_buffer(c["addr"], c["n"]).hex()
    elif c["op"] == "write":
        r = te.write_bytes_to_buffer(c["addr"], bytes.fromhex(c["data"]), c["n"])
    elif c["op"] == "register":
        r = te.register_memory(c["addr"], c["n"])
    elif c["op"] == "unregister":
        r = te.unregister_memory(c["addr"])
    elif c["op"] == "notifies":
        r = [[type(n).__name__, n.name, n.msg] for n in te.get_notifies()]
    print(json.dumps({"r": r}), flush=True)
"""


class Target:
    def __init__(self):
        self.p = subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        line = self.p.stdout.readline()
        assert line, "the target process did not start"
        self.info = json.loads(line)
        self.segment = self.info["segment"]

    def do(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["r"]

    def read(self, addr, n):
        return bytes.fromhex(self.do(op="read", addr=addr, n=n))

    def kill(self):
        self.p.kill()
        self.p.wait()

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=30)


@pytest.fixture(scope="module")
def target():
    t = Target()
    yield t
    t.close()


@pytest.fixture
def engine():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
    yield te
    te.close()


@pytest.fixture
def local(engine):
    """A registered numpy buffer of the initiator."""
    buf = np.zeros(MiB, dtype=np.uint8)
    assert engine.register_memory(buf.ctypes.data, buf.nbytes) == 0, engine.last_error
    yield buf
    assert engine.unregister_memory(buf.ctypes.data) == 0


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def dead_segment():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def test_install_as_mooncake():
    saved = {k: sys.modules.get(k) for k in ("mooncake", "mooncake.engine")}
    try:
        xfer.mooncake.install_as_mooncake()
        import mooncake.engine
        from mooncake.engine import TransferEngine as TE
        assert TE is TransferEngine and mooncake.engine is mce and mooncake.engine.TransferOpcode.Write == 1
        # The connector's names stay where they were.
        from mooncake import MooncakeTransferEngineConnector  # noqa: F401
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@pytest.mark.parametrize("metadata,protocol,want", [
    # Metadata servers that nothing serves (test_mooncake_metadata.py runs one).
    ("etcd://127.0.0.1:1", "tcp", mce.ERR_METADATA),
    ("http://127.0.0.1:1/metadata", "tcp", mce.ERR_METADATA),
    ("127.0.0.1:1", "tcp", mce.ERR_METADATA),  # Mooncake reads a bare address as etcd's
    ("redis://127.0.0.1:6379", "tcp", mce.ERR_NOT_IMPLEMENTED),
    ("ftp://127.0.0.1:21", "tcp", mce.ERR_INVALID_ARGUMENT),
    ("", "tcp", mce.ERR_INVALID_ARGUMENT),
    ("P2PHANDSHAKE", "nvlink", mce.ERR_INVALID_ARGUMENT),
])
def test_initialize_refuses(metadata, protocol, want):
    te = TransferEngine()
    assert te.initialize("127.0.0.1", metadata, protocol, "") == want
    assert te.last_error
    assert te.get_rpc_port() == 0


def test_initialize_ext_and_port():
    te = TransferEngine()
    assert te.initialize_ext("127.0.0.1", "127.0.0.1:1", "tcp", "", "etcd") == mce.ERR_METADATA
    assert "etcd 127.0.0.1:1" in te.last_error
    assert te.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "") == 0
    try:
        assert 0 < te.get_rpc_port() < 65536
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == mce.ERR_INVALID_ARGUMENT  # twice
    finally:
        te.close()
        te.close()  # idempotent


def test_uninitialized_calls_fail_cleanly():
    te = TransferEngine()
    assert te.register_memory(1 << 20, 4096) == mce.ERR_INVALID_ARGUMENT
    assert te.allocate_managed_buffer(4096) == 0
    assert te.transfer_sync_write("127.0.0.1:1", 1, 1, 1) == mce.ERR_INVALID_ARGUMENT
    assert te.batch_transfer_async_write("127.0.0.1:1", [1], [1], [1]) == 0
    assert te.transfer_check_status(1) == -1


def test_register_and_unregister(engine):
    a = np.zeros(1 << 16, dtype=np.uint8)
    c = ctypes.create_string_buffer(4096)
    base = a.ctypes.data
    assert engine.register_memory(base, a.nbytes) == 0
    assert engine.register_memory(base + 100, 10) == mce.ERR_ADDRESS_OVERLAPPED
    # A batch with one bad range registers none of them.
    assert engine.batch_register_memory([ctypes.addressof(c), base + 8], [4096, 8]) == mce.ERR_ADDRESS_OVERLAPPED
    assert engine.unregister_memory(ctypes.addressof(c)) == mce.ERR_ADDRESS_NOT_REGISTERED
    assert engine.batch_register_memory([ctypes.addressof(c)], [4096, 8]) == mce.ERR_INVALID_ARGUMENT
    assert engine.batch_register_memory([ctypes.addressof(c)], [4096]) == 0
    assert engine.batch_unregister_memory([base, ctypes.addressof(c)]) == 0
    assert engine.unregister_memory(base) == mce.ERR_ADDRESS_NOT_REGISTERED
    # Not host memory of this process, or not host memory at all: refused before the engine sees it.
    assert engine.register_memory(8, 4096) == mce.ERR_INVALID_ARGUMENT
    assert "not host memory" in engine.last_error
    # Host memory said to be on a GPU: no driver here (-6), or a driver that does not know it (-1).
    want = mce.ERR_INVALID_ARGUMENT if mce.SUPPORT_CUDA else mce.ERR_DEVICE_NOT_FOUND
    assert engine.register_memory(base, a.nbytes, "cuda:0") == want
    assert engine.register_memory(base, a.nbytes, "npu:0") == mce.ERR_NOT_IMPLEMENTED
    assert engine.register_memory(base, 0) == mce.ERR_INVALID_ARGUMENT


def test_register_torch_cpu_tensor(engine):
    torch = pytest.importorskip("torch")
    t = torch.arange(4096, dtype=torch.uint8)
    assert engine.register_memory(t.data_ptr(), t.numel()) == 0
    assert engine.read_bytes_from_buffer(t.data_ptr() + 1, 3) == bytes([1, 2, 3])
    assert engine.unregister_memory(t.data_ptr()) == 0


def test_managed_buffers_and_local_bytes(engine):
    addr = engine.allocate_managed_buffer(1 << 16)
    assert addr != 0
    assert engine.write_bytes_to_buffer(addr + 10, b"hello xfer", 10) == 0
    assert engine.read_bytes_from_buffer(addr + 10, 10) == b"hello xfer"
    assert engine.read_bytes_from_buffer(addr, 0) == b""
    # Past the buffer's end: refused, nothing touched.
    assert engine.write_bytes_to_buffer(addr + (1 << 16) - 4, b"12345678", 8) == mce.ERR_ADDRESS_NOT_REGISTERED
    with pytest.raises(ValueError, match="not within a registered buffer"):
        engine.read_bytes_from_buffer(addr + (1 << 16) - 4, 8)
    assert engine.write_bytes_to_buffer(addr, b"abc", 4) == mce.ERR_INVALID_ARGUMENT
    # A managed buffer is not unregistered, and freed only once.
    assert engine.unregister_memory(addr) == mce.ERR_INVALID_ARGUMENT
    assert engine.free_managed_buffer(addr, 1 << 16) == 0
    assert engine.free_managed_buffer(addr, 1 << 16) == mce.ERR_ADDRESS_NOT_REGISTERED
    assert engine.allocate_managed_buffer(0) == 0
    assert engine.allocate_managed_buffer(-5) == 0


def test_first_buffer_address(engine, target):
    assert engine.get_first_buffer_address(target.segment) == target.info["managed"]
    assert engine.get_first_buffer_address(dead_segment()) == 0


def test_sync_write_and_read(engine, target, local):
    data = pattern(MiB, 1)
    local[:] = data
    dst = target.info["arr"]
    assert engine.transfer_sync_write(target.segment, local.ctypes.data, dst, MiB) == 0, engine.last_error
    assert target.read(dst + 12345, 1000) == data[12345:13345].tobytes()
    local[:] = 0
    assert engine.transfer_sync_read(target.segment, local.ctypes.data + 7, dst + 100, 5000) == 0, engine.last_error
    assert local[7:5007].tobytes() == data[100:5100].tobytes()
    # transfer_sync with an opcode, to the ctypes buffer and the managed one.
    for name in ("cbuf", "managed"):
        local[:4096] = pattern(4096, 2)
        assert engine.transfer_sync(target.segment, local.ctypes.data, target.info[name], 4096,
                                    mce.TransferOpcode.Write) == 0, engine.last_error
        assert target.read(target.info[name], 4096) == local[:4096].tobytes()
    assert engine.transfer_sync(target.segment, local.ctypes.data, dst, 16, 7) == mce.ERR_INVALID_ARGUMENT


def test_batch_sync(engine, target, local):
    data = pattern(64 * 1024, 3)
    local[:len(data)] = data
    dst = target.info["arr"]
    offs = [0, 4096, 20000, 60000]
    lens = [4096, 100, 9999, 4000]
    assert engine.batch_transfer_sync_write(target.segment, [local.ctypes.data + o for o in offs],
                                            [dst + 2 * o for o in offs], lens) == 0, engine.last_error
    for o, n in zip(offs, lens):
        assert target.read(dst + 2 * o, n) == data[o:o + n].tobytes()
    local[:] = 0
    assert engine.batch_transfer_sync_read(target.segment, [local.ctypes.data + o for o in offs],
                                           [dst + 2 * o for o in offs], lens) == 0, engine.last_error
    for o, n in zip(offs, lens):
        assert local[o:o + n].tobytes() == data[o:o + n].tobytes()
    assert engine.batch_transfer_sync(target.segment, [local.ctypes.data], [dst], [8], mce.Read) == 0
    # Lists of different lengths.
    assert engine.batch_transfer_sync_write(target.segment, [local.ctypes.data], [dst, dst], [8]) == \
        mce.ERR_INVALID_ARGUMENT


def test_async(engine, target, local):
    data = pattern(256 * 1024, 4)
    local[:len(data)] = data
    dst = target.info["arr"]
    ids = [engine.batch_transfer_async_write(target.segment, [local.ctypes.data + i * 65536],
                                             [dst + i * 65536], [65536]) for i in range(4)]
    assert all(ids) and len(set(ids)) == 4
    assert engine.get_batch_transfer_status(ids) == 0
    assert target.read(dst, 256 * 1024) == data.tobytes()
    # Freed once waited for: unknown since.
    assert engine.get_batch_transfer_status(ids[:1]) == -1
    local[:] = 0
    bid = engine.batch_transfer_async_read(target.segment, [local.ctypes.data], [dst], [256 * 1024])
    assert bid and engine.get_batch_transfer_status([bid]) == 0
    assert local[:256 * 1024].tobytes() == data.tobytes()
    bid = engine.batch_transfer_async(target.segment, [local.ctypes.data], [dst], [16], mce.Write)
    assert bid and engine.get_batch_transfer_status([bid]) == 0
    # transfer_submit_write and transfer_check_status.
    local[:4096] = pattern(4096, 5)
    bid = engine.transfer_submit_write(target.segment, local.ctypes.data, dst + 8192, 4096)
    assert bid > 0
    deadline = time.monotonic() + 30
    while (s := engine.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert s == 1
    assert engine.transfer_check_status(bid) == -1  # freed when it completed
    assert target.read(dst + 8192, 4096) == local[:4096].tobytes()


def test_unregistered_ranges(engine, target, local):
    arr, n = target.info["arr"], 1 << 20
    before = target.read(arr + n - 16, 16)
    # A remote range running past the target's buffer: refused, nothing moves.
    assert engine.transfer_sync_write(target.segment, local.ctypes.data, arr + n - 16, 32) == \
        mce.ERR_ADDRESS_NOT_REGISTERED
    assert "not within a registered buffer" in engine.last_error
    assert target.read(arr + n - 16, 16) == before
    assert engine.transfer_sync_read(target.segment, local.ctypes.data, 4096, 16) == mce.ERR_ADDRESS_NOT_REGISTERED
    assert engine.batch_transfer_async_write(target.segment, [local.ctypes.data, local.ctypes.data],
                                             [arr, arr + n], [16, 16]) == 0
    assert engine.transfer_submit_write(target.segment, local.ctypes.data, arr + n, 16) == 0
    # A local range not registered here.
    other = np.zeros(4096, dtype=np.uint8)
    assert engine.transfer_sync_write(target.segment, other.ctypes.data, arr, 16) == mce.ERR_ADDRESS_NOT_REGISTERED
    assert engine.transfer_sync_write(target.segment, local.ctypes.data + MiB - 8, arr, 16) == \
        mce.ERR_ADDRESS_NOT_REGISTERED
    # Unknown batches.
    assert engine.get_batch_transfer_status([123456789]) == -1
    assert engine.transfer_check_status(123456789) == -1


def test_ranges_registered_and_unregistered_later(engine, target, local):
    spare = target.info["spare"]
    assert engine.transfer_sync_write(target.segment, local.ctypes.data, spare, 16) == mce.ERR_ADDRESS_NOT_REGISTERED
    assert target.do(op="register", addr=spare, n=4096) == 0
    local[:4096] = pattern(4096, 6)
    assert engine.transfer_sync_write(target.segment, local.ctypes.data, spare, 4096) == 0, engine.last_error
    assert target.read(spare, 4096) == local[:4096].tobytes()
    assert target.do(op="unregister", addr=spare) == 0
    assert engine.transfer_sync_write(target.segment, local.ctypes.data, spare, 16) == mce.ERR_ADDRESS_NOT_REGISTERED


def test_unknown_segments(engine, local):
    for seg, want in [("no-port", mce.ERR_INVALID_ARGUMENT), (dead_segment(), mce.ERR_SOCKET),
                      ("no-such-host.invalid:1234", mce.ERR_DNS)]:
        start = time.monotonic()
        code = engine.transfer_sync_write(seg, local.ctypes.data, 4096, 16)
        assert code == want, (seg, code, engine.last_error)
        assert time.monotonic() - start < 30
    assert engine.batch_transfer_async_read(dead_segment(), [local.ctypes.data], [4096], [16]) == 0


def test_dead_peer_within_timeout(engine, local):
    t = Target()
    try:
        dst = t.info["arr"]
        assert engine.transfer_sync_write(t.segment, local.ctypes.data, dst, 4096) == 0, engine.last_error
        t.kill()
        start = time.monotonic()
        code = engine.transfer_sync_write(t.segment, local.ctypes.data, dst, 4096)
        assert code == mce.ERR_SOCKET, engine.last_error
        assert time.monotonic() - start < 30, f"failed only after {time.monotonic() - start:.1f} s"
        bid = engine.batch_transfer_async_write(t.segment, [local.ctypes.data], [dst], [4096])
        assert bid == 0 or engine.get_batch_transfer_status([bid]) == -1
    finally:
        t.kill()


# An initiator whose target stops (SIGSTOP: alive, connected, silent),
# with MC_TRANSFER_TIMEOUT at its least, 5 s, read when the library loads.
STOPPED = r"""
import json, sys, time
import numpy as np
from xfer.mooncake.engine import TransferEngine, TransferNotify, Write
seg, dst, notify = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "notify"
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
buf = np.zeros(1 << 20, dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
assert te.transfer_sync_write(seg, buf.ctypes.data, dst, 4096) == 0, te.last_error
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
if notify:
    code = te.transfer_sync(seg, buf.ctypes.data, dst, 1 << 20, Write, TransferNotify("stopped", "peer"))
else:
    code = te.transfer_sync_write(seg, buf.ctypes.data, dst, 1 << 20)
print(json.dumps({"code": code, "seconds": time.monotonic() - start, "error": te.last_error}), flush=True)
"""


def wait_stopped(pid, seconds=10):
    """Waits until every thread of pid is stopped: kill(SIGSTOP) returns
    before they all are, and on a busy host a thread may still answer."""
    import os
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        if states and all(st in "tT" for st in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop within {seconds} s")


@pytest.mark.parametrize("notify", [False, True])
def test_stopped_peer_times_out(notify):
    import os
    import signal
    t = Target()
    env = dict(os.environ, MC_TRANSFER_TIMEOUT="5")
    p = subprocess.Popen([sys.executable, "-c", STOPPED, t.segment, str(t.info["arr"]), "notify" if notify else ""],
                         stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
        t.p.send_signal(signal.SIGSTOP)
        wait_stopped(t.p.pid)
        p.stdin.write("go\n")
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
        assert out["code"] < 0, out
        assert 4 < out["seconds"] < 20, out
    finally:
        p.kill()
        p.wait()
        t.p.send_signal(signal.SIGCONT)
        t.kill()


def notifies(target, want, seconds=5):
    """The target's notifications, taken until want have come (they
    arrive just after the transfer returns) or seconds have passed."""
    got, deadline = [], time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got += [tuple(n) for n in target.do(op="notifies")]
        if len(got) < want:
            time.sleep(0.005)
    return got


def test_notify(engine, target, local):
    dst = target.info["arr"]
    data = pattern(3 * 65536, 7)
    local[:len(data)] = data
    # One transfer: the notify comes once the data is in place, as a TransferNotify.
    note = mce.TransferNotify("prefill-0", "req-17 layers 0-31")
    assert engine.transfer_sync(target.segment, local.ctypes.data, dst, 65536, mce.Write, note) == 0, \
        engine.last_error
    assert notifies(target, 1) == [("TransferNotify", "prefill-0", "req-17 layers 0-31")]
    assert target.read(dst, 65536) == data[:65536].tobytes()
    # A batch, by keyword, with non-ASCII text and an empty message; a READ notifies too.
    offs = [0, 65536, 131072]
    assert engine.batch_transfer_sync(target.segment, [local.ctypes.data + o for o in offs],
                                      [dst + 2 * o for o in offs], [65536] * 3, mce.Write,
                                      notify=mce.TransferNotify(name="décode", msg="")) == 0, engine.last_error
    assert engine.transfer_sync(target.segment, local.ctypes.data, dst, 16, mce.Read,
                                mce.TransferNotify("r", "read")) == 0, engine.last_error
    assert notifies(target, 2) == [("TransferNotify", "décode", ""), ("TransferNotify", "r", "read")]
    for o in offs:
        assert target.read(dst + 2 * o, 65536) == data[o:o + 65536].tobytes()
    # Taken once: nothing is left, and the initiator itself received none.
    assert notifies(target, 1, seconds=0.2) == []
    assert engine.get_notifies() == []
    # A message as large as one engine message holds (64 KiB less the header) arrives whole.
    big = "x" * ((64 << 10) - 8 - 3)
    assert engine.transfer_sync(target.segment, local.ctypes.data, dst, 16, mce.Write,
                                mce.TransferNotify("big", big)) == 0, engine.last_error
    assert notifies(target, 1) == [("TransferNotify", "big", big)]


def test_notify_refused(engine, target, local):
    arr, n = target.info["arr"], MiB
    before = target.read(arr, 64)
    local[:64] = 0xAB
    # Too large for one message, or not a notify: refused, and nothing moves.
    too_big = mce.TransferNotify("n", "y" * (64 << 10))
    assert engine.transfer_sync(target.segment, local.ctypes.data, arr, 64, mce.Write, too_big) == \
        mce.ERR_INVALID_ARGUMENT
    assert "notify" in engine.last_error
    assert engine.transfer_sync(target.segment, local.ctypes.data, arr, 64, mce.Write, "n:m") == \
        mce.ERR_INVALID_ARGUMENT
    assert engine.transfer_sync(target.segment, local.ctypes.data, arr, 64, mce.Write,
                                mce.TransferNotify(b"bytes", "m")) == mce.ERR_INVALID_ARGUMENT
    assert target.read(arr, 64) == before
    # A transfer that fails sends no notify: an unregistered range on either side, an unknown segment.
    note = mce.TransferNotify("n", "m")
    assert engine.transfer_sync(target.segment, local.ctypes.data, arr + n - 8, 16, mce.Write, note) == \
        mce.ERR_ADDRESS_NOT_REGISTERED
    other = np.zeros(4096, dtype=np.uint8)
    assert engine.transfer_sync(target.segment, other.ctypes.data, arr, 16, mce.Write, note) == \
        mce.ERR_ADDRESS_NOT_REGISTERED
    assert engine.batch_transfer_sync(dead_segment(), [local.ctypes.data], [arr], [16], mce.Write, note) == \
        mce.ERR_SOCKET
    assert target.read(arr, 64) == before
    assert notifies(target, 1, seconds=0.2) == []


def test_notify_dead_peer(engine, local):
    t = Target()
    try:
        dst = t.info["arr"]
        note = mce.TransferNotify("n", "m")
        assert engine.transfer_sync(t.segment, local.ctypes.data, dst, 4096, mce.Write, note) == 0, engine.last_error
        assert notifies(t, 1) == [("TransferNotify", "n", "m")]
        t.kill()
        start = time.monotonic()
        assert engine.transfer_sync(t.segment, local.ctypes.data, dst, 4096, mce.Write, note) == mce.ERR_SOCKET, \
            engine.last_error
        assert time.monotonic() - start < 30
    finally:
        t.kill()


def test_send_probe(engine, target):
    assert engine.send_probe(target.segment) == 0, engine.last_error
    assert engine.send_probe(target.segment) == 0, engine.last_error
    for seg, want in [("no-port", mce.ERR_INVALID_ARGUMENT), (dead_segment(), mce.ERR_SOCKET),
                      ("no-such-host.invalid:1234", mce.ERR_DNS)]:
        assert engine.send_probe(seg) == want, (seg, engine.last_error)
    assert TransferEngine().send_probe(target.segment) == mce.ERR_INVALID_ARGUMENT  # not initialized


def test_send_probe_dead_peer(engine):
    t = Target()
    try:
        assert engine.send_probe(t.segment) == 0, engine.last_error
        t.kill()
        start = time.monotonic()
        assert engine.send_probe(t.segment) == mce.ERR_SOCKET, engine.last_error
        assert time.monotonic() - start < 30
    finally:
        t.kill()


def test_cuda_flags_and_calls(engine, target, local):
    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:
        driver = False
    assert mce.SUPPORT_CUDA is driver
    assert (mce.SUPPORT_EFA, mce.SUPPORT_HIP, mce.SUPPORT_MNNVL, mce.SUPPORT_INTRA_NVLINK) == (False,) * 4
    arr = target.info["arr"]
    local[:4096] = pattern(4096, 8)
    calls = [
        lambda: engine.transfer_write_on_cuda(target.segment, local.ctypes.data, arr, 4096),
        lambda: engine.transfer_read_on_cuda(target.segment, local.ctypes.data, arr, 4096, stream_ptr=0),
        lambda: engine.batch_transfer_write_on_cuda(target.segment, [local.ctypes.data], [arr], [4096], 0, ""),
        lambda: engine.batch_transfer_read_on_cuda(target.segment, [local.ctypes.data], [arr], [4096]),
    ]
    if not driver:
        before = target.read(arr, 4096)
        for call in calls:
            assert call() == mce.ERR_DEVICE_NOT_FOUND
            assert "no CUDA driver" in engine.last_error
        assert target.read(arr, 4096) == before
        return
    # With a driver, on the default stream, host memory moves as with the plain calls.
    assert calls[0]() == 0, engine.last_error
    assert target.read(arr, 4096) == local[:4096].tobytes()
    for call in calls[1:]:
        assert call() == 0, engine.last_error


class StandInDriver:
    """In place of libcuda: records each stream synchronized and answers rc."""

    def __init__(self, rc=0):
        self.rc, self.streams = rc, []

    def cuStreamSynchronize(self, stream):  # noqa: N802 (the driver's name)
        self.streams.append(stream)
        return self.rc


def test_cuda_paths_with_a_stand_in_driver(engine, target, local, monkeypatch):
    """The Python side of the calls where the driver loads (no GPU here:
    the engine's own driver lookup still finds none)."""
    driver = StandInDriver()
    monkeypatch.setattr(mce, "_cuda", driver)
    arr = target.info["arr"]
    local[:4096] = pattern(4096, 9)
    # The stream is synchronized first, then the transfer moves.
    assert engine.transfer_write_on_cuda(target.segment, local.ctypes.data, arr, 4096, stream_ptr=0x1234) == 0, \
        engine.last_error
    assert driver.streams == [0x1234]
    assert target.read(arr, 4096) == local[:4096].tobytes()
    local[:4096] = 0
    assert engine.batch_transfer_read_on_cuda(target.segment, [local.ctypes.data], [arr], [4096]) == 0
    assert driver.streams[-1] is None  # 0: the default stream
    assert local[:4096].tobytes() == target.read(arr, 4096)
    # A stream that fails to synchronize: -1, nothing moves.
    before = target.read(arr, 16)
    local[:16] = 0x5A
    driver.rc = 700
    assert engine.transfer_write_on_cuda(target.segment, local.ctypes.data, arr, 16, 0x99) == mce.ERR_INVALID_ARGUMENT
    assert "CUresult 700" in engine.last_error
    # No context on the default stream: nothing was queued there, so it moves; on another stream it fails.
    driver.rc = 201
    assert engine.batch_transfer_write_on_cuda(target.segment, [local.ctypes.data], [arr], [16], 0x99) == \
        mce.ERR_INVALID_ARGUMENT
    assert target.read(arr, 16) == before
    assert engine.batch_transfer_write_on_cuda(target.segment, [local.ctypes.data], [arr], [16]) == 0
    assert target.read(arr, 16) == bytes([0x5A] * 16)
    # GPU registration reaches the engine, which finds no driver of its own: -6 for cuda:N;
    # with "*", memory that is neither host nor GPU memory is -1.
    a = np.zeros(4096, dtype=np.uint8)
    assert engine.register_memory(a.ctypes.data, 4096, "cuda:0") == mce.ERR_DEVICE_NOT_FOUND
    assert engine.register_memory(8, 4096) == mce.ERR_INVALID_ARGUMENT
    assert "nor GPU memory" in engine.last_error
    assert engine.register_memory(a.ctypes.data, 4096) == 0  # host memory stays host memory
    assert engine.unregister_memory(a.ctypes.data) == 0


def test_mooncake_md_examples_run():
    """The Python blocks of docs/MOONCAKE.md run, in order, in one namespace."""
    import os
    import re
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    with open(os.path.join(root, "docs", "MOONCAKE.md")) as f:
        code = re.findall(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)
    assert code, "no python blocks in docs/MOONCAKE.md: the test checks nothing"
    ns = {}
    for i, c in enumerate(code):
        exec(compile(c, f"docs/MOONCAKE.md block {i + 1}", "exec"), ns)  # noqa: S102 (the repository's own docs)
