"""xfer.mooncake against what vLLM-Omni's Mooncake connector promises its
callers: the allocator and buffer classes on their own, then connectors on
tcp and shm. The configs ask for rdma, as vLLM-Omni's do; XFER_TRANSPORT
picks the transport, as for the xfer command."""

import logging
import os
import socket
import threading
import time

import numpy as np
import pytest

import xfer
from xfer import mooncake

# The pool is a torch tensor where torch is installed, else a NumPy array:
# np.asarray reads either, with no copy.
from xfer.mooncake import BufferAllocator, ManagedBuffer, MooncakeTransferEngineConnector, TransferEngine

MiB = 1 << 20


def config(**kw):
    c = {"host": "127.0.0.1", "zmq_port": 0, "protocol": "rdma", "memory_pool_size": 16 * MiB}
    c.update(kw)
    return c


@pytest.fixture(params=["tcp", "shm"])
def transport(request, monkeypatch):
    monkeypatch.setenv("XFER_TRANSPORT", request.param)
    return request.param


@pytest.fixture
def pair(transport):
    p = MooncakeTransferEngineConnector(config())
    c = MooncakeTransferEngineConnector(config())
    yield p, c
    c.close()
    p.close()


class TestAllocator:
    def test_first_fit_and_reuse(self):
        a = BufferAllocator(total_size=1024, alignment=64)
        assert [a.alloc(100), a.alloc(64), a.alloc(1)] == [0, 128, 192]
        a.free(128, 64)
        assert a.alloc(10) == 128  # the first hole that fits
        with pytest.raises(MemoryError):
            a.alloc(1024 - 256 + 1)
        assert a.alloc(1024 - 256) == 256

    def test_double_free_is_ignored(self, caplog):
        a = BufferAllocator(total_size=256, alignment=64)
        x, y = a.alloc(64), a.alloc(64)
        a.free(x, 64)
        a.free(y, 64)  # merges with x's block
        with caplog.at_level(logging.WARNING, logger="xfer.mooncake"):
            a.free(x, 64)
        assert "double free" in caplog.text
        assert a.alloc(256) == 0

    def test_overlapping_free_raises(self):
        a = BufferAllocator(total_size=512, alignment=64)
        x = a.alloc(128)
        a.alloc(128)
        a.free(x, 128)
        with pytest.raises(RuntimeError, match="overlaps"):
            a.free(64, 128)

    def test_holes_merge_back(self):
        a = BufferAllocator(total_size=256, alignment=64)
        blocks = [a.alloc(64) for _ in range(4)]
        a.free(blocks[1], 64)
        a.free(blocks[3], 64)
        with pytest.raises(MemoryError):
            a.alloc(128)
        a.free(blocks[2], 64)
        a.free(blocks[0], 64)
        assert a.free_blocks == [(0, 256)]

    def test_threads(self):
        a = BufferAllocator(total_size=MiB, alignment=64)
        failed = []

        def work():
            try:
                for i in range(200):
                    off = a.alloc(1000 + i)
                    a.free(off, 1000 + i)
            except Exception as e:  # noqa: BLE001
                failed.append(e)

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not failed and a.free_blocks == [(0, MiB)]


class TestBuffer:
    def test_views(self):
        a = BufferAllocator(total_size=4096, alignment=64)
        pool = np.zeros(4096, dtype=np.uint8)
        off = a.alloc(64)
        pool[off:off + 64] = np.arange(16, dtype=np.float32).view(np.uint8)
        with ManagedBuffer(a, off, 64, pool) as b:
            assert b.tensor.shape == (64,)
            assert (b.as_tensor(dtype=np.float32, shape=(4, 4)).ravel() == np.arange(16)).all()
            assert b.to_bytes() == np.arange(16, dtype=np.float32).tobytes()
            with pytest.raises(ValueError):
                b.as_tensor(dtype=np.float32, shape=(5,))
        assert b._released and a.alloc(64) == off

    def test_release_callback_keeps_the_block(self):
        a = BufferAllocator(total_size=256, alignment=64)
        kept = []
        b = ManagedBuffer(a, a.alloc(128), 100, np.zeros(256, np.uint8), release_callback=lambda x: kept.append(x) or True,
                          allocation_size=128)
        b.release()
        assert kept == [b] and b._released
        with pytest.raises(MemoryError):
            a.alloc(256)
        b._release_callback, b._released = None, False
        b.release()  # the whole allocation goes back
        assert a.alloc(256) == 0


class TestConnector:
    def test_attributes(self, transport, caplog):
        with caplog.at_level(logging.WARNING, logger="xfer.mooncake"):
            c = MooncakeTransferEngineConnector(config(stage_id=2, pool_prewarm_slots=4, extra=1))
        with c:
            # One warning names every key it ignores.
            assert [r.getMessage() for r in caplog.records if "not used" in r.getMessage()] == \
                ["MooncakeTransferEngineConnector: config keys ['extra', 'pool_prewarm_slots'] are not used (ignored)"]
            assert c.stage_id == 2 and c.role == "sender" and c.can_put
            assert c.rpc_port != 0 and c.rpc_port == c.zmq_port == c.engine.get_rpc_port()
            assert c.pool_size == 16 * MiB and c.pool_device == "cpu" and len(c.pool) == 16 * MiB
            assert c.protocol == transport
            assert c.get_connection_info() == {"host": "127.0.0.1", "zmq_port": c.zmq_port, "rpc_port": c.rpc_port,
                                               "can_put": True}
            h = c.health()
            assert h["status"] == "healthy" and h["pool_size"] == 16 * MiB and h["puts"] == 0
            assert c.supports_raw_data
        assert c._stop_event.is_set()
        assert c.health() == {"status": "unhealthy", "error": "Connector is closed"}
        c.close()  # again: nothing

    def test_defaults(self):
        assert mooncake.DEFAULTS["memory_pool_size"] == 1 << 30
        assert mooncake.DEFAULTS["role"] == "sender" and mooncake.DEFAULTS["protocol"] == "rdma"
        with pytest.raises(ValueError, match="role"):
            MooncakeTransferEngineConnector(config(role="middle"))
        assert TransferEngine is not None and TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0

    def test_values(self, pair):
        p, c = pair
        arr = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)
        cases = [("array", arr, True), ("bytes", b"payload" * 1000, True), ("object", {"k": [1, 2, 3], "n": None}, False)]
        for key, value, fast in cases:
            ok, size, meta = p.put("s0", "s1", key, value)
            assert ok and set(meta) == {"source_host", "source_port", "data_size", "is_fast_path"}
            assert meta["is_fast_path"] is fast and meta["data_size"] == size
            assert (meta["source_host"], meta["source_port"]) == ("127.0.0.1", p.zmq_port)
            got, n = c.get("s0", "s1", key, meta)
            assert n == size
            if not fast:
                assert got == value
                continue
            assert isinstance(got, ManagedBuffer)
            if isinstance(value, bytes):
                assert got.to_bytes() == value
            else:
                assert np.array_equal(np.asarray(got.as_tensor(dtype=np.float32, shape=arr.shape)), arr)
            got.release()
        assert c.health()["gets"] == 3 and p.health()["puts"] == 3

    def test_ints_for_stages(self, pair):
        p, c = pair
        ok, _, meta = p.put(0, 1, "k", b"v")
        assert ok and c.get(0, 1, "k", meta)[0].to_bytes() == b"v"

    def test_taken_values_leave_the_table(self, pair):
        p, c = pair
        ok, _, meta = p.put("s0", "s1", "k", b"v" * 100)
        key = MooncakeTransferEngineConnector._make_key("k", "s0", "s1")
        assert ok and key == "k@s0_s1" and key in p._local_buffers
        buf, _ = c.get("s0", "s1", "k", meta)
        buf.release()
        deadline = time.monotonic() + 20
        while key in p._local_buffers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert key not in p._local_buffers and len(p._local_buffers) == 0

    def test_cleanup(self, pair):
        p, c = pair
        ok, _, meta = p.put("s0", "s1", "k", b"v")
        p.cleanup("k", from_stage="s0", to_stage="s1")
        assert "k@s0_s1" not in p._local_buffers
        assert c.get("s0", "s1", "k", meta) is None  # gone: None, no exception
        p.put("s0", "s1", "j", b"v")
        p.cleanup("j@s0_s1")  # the stored key, with no stages
        assert len(p._local_buffers) == 0
        with pytest.raises(ValueError):
            p.cleanup("k", from_stage="s0")

    def test_refusals(self, pair):
        p, c = pair
        assert p.put("s0", "s1", "e", b"") == (False, 0, None)
        assert p.put("s0", "s1", "z", np.zeros(0, np.float32)) == (False, 0, None)
        assert c.get("s0", "s1", "never", {"source_host": "127.0.0.1", "source_port": p.zmq_port, "data_size": 8,
                                            "is_fast_path": True}) is None
        assert c.get("s0", "s1", "never", {"source_host": "127.0.0.1"}) is None
        assert c.get("s0", "s1", "never", {"source_host": "127.0.0.1", "source_port": p.zmq_port, "data_size": 0}) is None
        with pytest.raises(RuntimeError, match="update_sender_info"):
            c.get("s0", "s1", "k")
        with MooncakeTransferEngineConnector(config(role="receiver")) as r:
            assert not r.can_put and r.put("s0", "s1", "k", b"v") == (False, 0, None)

    def test_without_metadata(self, pair):
        p, c = pair
        p.put("s0", "s1", "k", b"by sender info")
        c.update_sender_info("127.0.0.1", p.zmq_port)
        buf, _ = c.get("s0", "s1", "k")
        assert buf.to_bytes() == b"by sender info"
        buf.release()
        # Partial metadata (heterogeneous TP): the producer, not the size.
        p.put("s0", "s1", "part", b"partial")
        buf, n = c.get("s0", "s1", "part", {"source_host": "127.0.0.1", "source_port": p.zmq_port})
        assert (buf.to_bytes(), n) == (b"partial", 7)
        buf.release()
        c.update_sender_info("127.0.0.1", p.zmq_port, sender_rank=3)
        assert c._resolve_sender_endpoint(3) == ("127.0.0.1", p.zmq_port)
        c.abandon_get("k")
        c.reap_consumed()

    def test_zero_copy(self, pair):
        p, c = pair
        n = 1 << 20
        off = p.allocator.alloc(n)
        src = ManagedBuffer(p.allocator, off, n, p.pool)
        np.asarray(src.as_tensor(dtype=np.int32, shape=(n // 4,)))[:] = np.arange(n // 4, dtype=np.int32)
        used = p.health()["pool_used_bytes"]
        ok, size, meta = p.put("s0", "s1", "zc", src)
        assert ok and size == n and meta["is_fast_path"]
        assert p.health()["pool_used_bytes"] == used  # no copy
        buf, _ = c.get("s0", "s1", "zc", meta)
        assert np.array_equal(np.asarray(buf.as_tensor(dtype=np.int32, shape=(n // 4,))), np.arange(n // 4, dtype=np.int32))
        buf.release()
        src.release()

    def test_pool_full_and_back(self, transport):
        with MooncakeTransferEngineConnector(config(memory_pool_size=MiB)) as c:
            keys = []
            for i in range(20):
                ok, _, _ = c.put("s", "s", f"f{i}", np.ones(64 << 10, np.uint8))
                if not ok:
                    break
                keys.append(f"f{i}")
            assert 0 < len(keys) < 20
            assert c.health()["status"] == "unhealthy" or c.health()["pool_used_bytes"] > 0
            for k in keys:
                c.cleanup(k, from_stage="s", to_stage="s")
            assert c.put("s", "s", "again", np.ones(64 << 10, np.uint8))[0]

    def test_get_after_close_raises(self, transport):
        c = MooncakeTransferEngineConnector(config())
        c.close()
        with pytest.raises(RuntimeError, match="closed"):
            c.get("a", "b", "k", {"source_host": "127.0.0.1", "source_port": 1, "data_size": 1})
        with pytest.raises(RuntimeError, match="closed"):
            c.put("a", "b", "k", b"v")


def test_auto_host_asks_no_dns(monkeypatch):
    def no_dns(*a, **kw):
        raise AssertionError("a DNS query")

    for f in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getfqdn"):
        monkeypatch.setattr(socket, f, no_dns)
    addr = xfer.connector.local_address()
    socket.inet_aton(addr)  # an IPv4 address, not a name
    monkeypatch.setenv("XFER_TRANSPORT", "tcp")
    with MooncakeTransferEngineConnector({"host": "auto", "zmq_port": 0, "memory_pool_size": MiB}) as c:
        assert c.host == addr and c.get_connection_info()["host"] == addr


def test_native_connector_reads_mooncake_metadata(monkeypatch):
    # xfer.Connector: a stage_id key, and Mooncake's metadata naming the producer.
    monkeypatch.setenv("XFER_TRANSPORT", "tcp")
    with xfer.Connector({"role": "sender", "host": "127.0.0.1", "protocol": "rdma", "stage_id": 0}) as s, \
            xfer.Connector({"role": "receiver", "stage_id": 1}) as r:
        ok, size, _ = s.put("a", "b", "k", b"native")
        port = int(s.address.rsplit(":", 1)[1])
        got = r.get("a", "b", "k", {"source_host": "127.0.0.1", "source_port": port, "data_size": size, "is_fast_path": True})
        assert got == (b"native", 6)
        with pytest.raises(xfer.InvalidError, match="source_host"):
            r.get("a", "b", "k", {"source_host": "auto", "source_port": port})


def test_metrics_reports(monkeypatch, caplog):
    # MC_TE_METRIC turns on a report of throughput and pool use every
    # MC_TE_METRIC_INTERVAL_SECONDS, until close.
    monkeypatch.setenv("XFER_TRANSPORT", "tcp")
    monkeypatch.setenv("MC_TE_METRIC", "1")
    monkeypatch.setenv("MC_TE_METRIC_INTERVAL_SECONDS", "0.1")
    with caplog.at_level(logging.INFO, logger="xfer.mooncake"):
        with MooncakeTransferEngineConnector(config()) as c:
            c.put("a", "b", "k", b"v" * 1000)
            deadline = time.monotonic() + 20
            while "metrics:" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
    time.sleep(0.3)  # a report under way as close ran is out
    reports = [r.getMessage() for r in caplog.records if "metrics:" in r.getMessage()]
    assert reports and "puts 1" in reports[-1] and "of 16777216 bytes in use" in reports[-1]
    n = len(reports)
    time.sleep(0.3)
    assert len([r for r in caplog.records if "metrics:" in r.getMessage()]) == n  # none after close


def test_missing_device_under_auto_warns(monkeypatch, caplog):
    # A named RDMA device this host lacks: under auto, one warning, and the
    # connector opens on another transport.
    monkeypatch.delenv("XFER_TRANSPORT", raising=False)
    monkeypatch.setenv("RDMA_DEVICE_NAME", "nosuchdev9")
    with caplog.at_level(logging.WARNING, logger="xfer"):
        with xfer.Connector({"role": "sender", "protocol": "auto", "host": "127.0.0.1"}) as c:
            assert c.health()["status"] == "healthy"
    assert "the RDMA device 'nosuchdev9' does not exist on this host" in caplog.text


def test_too_large_names_memory_pool_size(caplog):
    with caplog.at_level(logging.WARNING, logger="xfer"):
        with xfer.Connector({"role": "sender", "protocol": "tcp", "host": "127.0.0.1", "memory_pool_size": MiB}) as c:
            assert c.put("a", "b", "k", b"x" * (2 * MiB)) == (False, 0, None)
    assert "raise memory_pool_size" in caplog.text and "Engine.MemoryMB" not in caplog.text


def _cuda():
    """torch where it sees a CUDA GPU; else the test skips (or fails, under
    XFER_REQUIRE_CUDA=1: the GPU machine's run)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        if os.environ.get("XFER_REQUIRE_CUDA") == "1":
            pytest.fail("XFER_REQUIRE_CUDA=1 but torch sees no CUDA GPU")
        pytest.skip("CUDA is not available")
    return torch


class TestGPUPool:
    """vLLM-Omni's TestGPUPool through xfer.mooncake: a pool on the GPU,
    puts of host and GPU tensors, and a get whose ManagedBuffer views the
    receiver's GPU pool (shm: CUDA IPC; tcp: staged through host memory)."""

    def test_pool_on_the_gpu(self, transport):
        torch = _cuda()
        with MooncakeTransferEngineConnector(config(memory_pool_device="cuda:0")) as c:
            assert c.pool_device == "cuda:0"
            assert isinstance(c.pool, torch.Tensor) and c.pool.is_cuda
            assert c.pool.numel() >= 16 * MiB

    def test_put_host_and_gpu_tensors(self, transport):
        torch = _cuda()
        with MooncakeTransferEngineConnector(config(memory_pool_device="cuda:0")) as c:
            for name, t in (("h2d", torch.randn(128, 128)), ("d2d", torch.randn(128, 128, device="cuda:0"))):
                ok, size, meta = c.put("s0", "s1", name, t)
                assert ok and size == t.numel() * 4 and meta["is_fast_path"]

    @pytest.mark.parametrize("shape", [(1,), (512, 512), (1024, 1024)])
    def test_end_to_end(self, transport, shape):
        torch = _cuda()
        p = MooncakeTransferEngineConnector(config(memory_pool_device="cuda:0"))
        c = MooncakeTransferEngineConnector(config(memory_pool_device="cuda:0"))
        try:
            orig = torch.randn(*shape, device="cuda:0")
            ok, _, meta = p.put("s0", "s1", "e2e", orig)
            assert ok
            buf, size = c.get("s0", "s1", "e2e", meta)
            assert size == orig.numel() * 4
            got = buf.as_tensor(dtype=orig.dtype, shape=orig.shape)
            assert got.is_cuda and torch.equal(got, orig)
            assert buf.to_bytes() == orig.cpu().numpy().tobytes()
            buf.release()
        finally:
            c.close()
            p.close()

    def test_gpu_tensor_into_host_pool(self, transport):
        torch = _cuda()
        p = MooncakeTransferEngineConnector(config(memory_pool_device="cuda:0"))
        c = MooncakeTransferEngineConnector(config())
        try:
            orig = torch.arange(4096, dtype=torch.int32, device="cuda:0")
            _, _, meta = p.put("s0", "s1", "d2h", orig)
            buf, _ = c.get("s0", "s1", "d2h", meta)
            got = buf.as_tensor(dtype=torch.int32, shape=(4096,))
            assert not got.is_cuda and torch.equal(got, orig.cpu())
            buf.release()
        finally:
            c.close()
            p.close()
