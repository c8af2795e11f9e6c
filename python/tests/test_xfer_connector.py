"""The connector's tests, after the classes of vLLM-Omni's Mooncake
connector test guide: TestBasicConnector, TestEndToEnd, TestLifecycle,
TestGPUPool and (slow) TestStressCorrectness."""

import hashlib
import os
import random
import threading
import time

import numpy as np
import pytest
import torch

import xfer
from conftest import MiB, make_pair


def md5(b):
    return hashlib.md5(b).hexdigest()


def tensor_md5(t):
    return md5(t.contiguous().numpy().tobytes())


class TestBasicConnector:
    def test_init(self, sender):
        h = sender.health()
        assert h["status"] == "healthy"
        assert h["role"] == "producer"
        assert h["pool_bytes"] == 16 * MiB
        host, port = sender.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0

    def test_bad_config(self):
        with pytest.raises(xfer.InvalidError, match="unknown keys"):
            xfer.Connector({"protocl": "tcp"})
        with pytest.raises(xfer.InvalidError, match="role"):
            xfer.Connector({"role": "middle"})
        with pytest.raises(xfer.InvalidError, match="transport"):
            xfer.Connector({"protocol": "udp"})
        with pytest.raises(xfer.InvalidError, match="memory_pool_size"):
            xfer.Connector({"memory_pool_size": 0})

    def test_engine_config(self):
        # Every key of xfer's config file passes through "engine": flat or
        # nested, and it takes effect (memory_mb sizes the pool).
        for engine in ({"memory_mb": 8, "conns": 1, "rdma_gid_index": 1, "rdma_use_cm": True, "handshake_timeout": "3s"},
                       {"memory_mb": 8, "tcp": {"conns": 1}, "rdma": {"gid_index": 1, "use_cm": True}, "log_level": "warn"}):
            with xfer.Connector({"role": "sender", "protocol": "tcp", "engine": engine}) as c:
                assert c.health()["pool_bytes"] == 8 * MiB
        s, r = make_pair("tcp", engine={"conns": 1, "recv_depth": 16})
        with s, r:
            ok, _, meta = s.put("a", "b", "k", b"over one connection")
            assert ok and r.get("a", "b", "k", metadata=meta)[0] == b"over one connection"

    def test_engine_config_refused(self):
        # A bad engine key is the library's error: the key, its line, where it belongs.
        with pytest.raises(xfer.InvalidError, match=r'unknown key "gid_idx" in rdma: did you mean gid_index\?'):
            xfer.Connector({"role": "sender", "protocol": "tcp", "engine": {"rdma": {"gid_idx": 1}}})
        with pytest.raises(xfer.InvalidError, match=r'unknown key "gid_index": it belongs in rdma'):
            xfer.Connector({"role": "sender", "protocol": "tcp", "engine": {"gid_index": 1}})
        with pytest.raises(xfer.InvalidError, match=r'conns: "many": not an integer'):
            xfer.Connector({"role": "sender", "protocol": "tcp", "engine": {"conns": "many"}})
        with pytest.raises(xfer.InvalidError, match="engine key 'transport' and the key 'protocol'"):
            xfer.Connector({"protocol": "tcp", "engine": {"transport": "shm"}})
        with pytest.raises(xfer.InvalidError, match="memory_pool_device"):
            xfer.Connector({"engine": {"memory_device": "cuda:0"}})
        with pytest.raises(xfer.InvalidError, match="engine"):
            xfer.Connector({"engine": ["conns", 1]})

    def test_put_tensor(self, sender):
        t = torch.randn(4, 8)
        ok, size, meta = sender.put("s0", "s1", "t", t)
        assert ok and size == 4 * 8 * 4
        assert meta["dtype"] == "F32" and meta["shape"] == [4, 8] and meta["key"] == "s0/s1/t"
        assert meta["producer"] == sender.address

    def test_put_numpy(self, sender):
        ok, size, meta = sender.put("s0", "s1", "n", np.arange(10, dtype=np.uint16))
        assert ok and size == 20 and meta["dtype"] == "U16"

    def test_int_stage_ids(self, tcp_pair):
        # vLLM-Omni numbers its stages: ints name the same stages as their text.
        s, r = tcp_pair
        ok, _, meta = s.put(0, 1, "k", b"v")
        assert ok and meta["key"] == "0/1/k"
        assert r.get("0", "1", "k", meta)[0] == b"v"
        with pytest.raises(TypeError, match="str or an int"):
            s.put(0.5, 1, "k", b"v")
        with pytest.raises(TypeError, match="str or an int"):
            s.put(True, 1, "k", b"v")
        with pytest.raises(TypeError):
            s.put(0, 1, 7, b"v")  # keys are strings
        s.put(0, 1, "k2", b"w")
        assert s.cleanup("k2") is True and s.cleanup("k2", 0, 1) is False

    def test_put_bytes(self, sender):
        ok, size, meta = sender.put("s0", "s1", "b", b"hello")
        assert ok and size == 5 and meta["kind"] == 1

    def test_put_object(self, sender):
        ok, size, meta = sender.put("s0", "s1", "o", {"a": [1, 2.5, "x", None, True]})
        assert ok and size > 0 and meta["kind"] == 3

    def test_put_unsafe_object_refused(self, sender):
        with pytest.raises(xfer.ObjectError, match="pickle_trusted_peers_only"):
            sender.put("s0", "s1", "o", {1, 2, 3})
        with pytest.raises(xfer.ObjectError):
            sender.put("s0", "s1", "o", {1: "int keys"})
        with pytest.raises(xfer.ObjectError):
            sender.put("s0", "s1", "o", float("nan"))

    def test_bad_keys(self, sender):
        with pytest.raises(xfer.InvalidError, match="stage"):
            sender.put("a/b", "c", "k", b"x")
        with pytest.raises(xfer.InvalidError, match="empty key"):
            sender.put("a", "c", "", b"x")
        with pytest.raises(TypeError):
            sender.put("a", "c", 7, b"x")

    def test_cleanup(self, sender):
        sender.put("s0", "s1", "c", b"x" * 1000)
        assert sender.health()["slots"] == 1
        assert sender.cleanup("c") is True
        assert sender.health()["slots"] == 0
        assert sender.health()["pool_used_bytes"] == 0
        assert sender.cleanup("c") is False

    def test_pool_exhaustion(self, sender):
        ok, size, meta = sender.put("s0", "s1", "big", torch.zeros(17 * MiB, dtype=torch.uint8))
        assert (ok, size, meta) == (False, 0, None)  # larger than the pool
        ok, _, _ = sender.put("s0", "s1", "a", torch.zeros(12 * MiB, dtype=torch.uint8))
        assert ok
        ok, size, meta = sender.put("s0", "s1", "b", torch.zeros(8 * MiB, dtype=torch.uint8))
        assert (ok, size, meta) == (False, 0, None)  # no room now
        assert sender.cleanup("a")
        ok, _, _ = sender.put("s0", "s1", "b", torch.zeros(8 * MiB, dtype=torch.uint8))
        assert ok  # room again

    def test_receiver_cannot_put(self):
        with xfer.Connector({"role": "receiver", "protocol": "tcp"}) as r:
            with pytest.raises(xfer.RoleError):
                r.put("a", "b", "k", b"x")


class TestEndToEnd:
    def test_tensor(self, pair):
        s, r = pair
        t = torch.randn(64, 128, dtype=torch.float32)
        ok, size, meta = s.put("s0", "s1", "t", t)
        assert ok
        got, n = r.get("s0", "s1", "t", meta)
        assert n == size and got.dtype == torch.float32 and torch.equal(got, t)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16,
                                       torch.int32, torch.int64, torch.uint8, torch.bool])
    def test_dtypes(self, tcp_pair, dtype):
        s, r = tcp_pair
        t = (torch.randn(3, 5) * 10).to(dtype)
        _, _, meta = s.put("s0", "s1", "d", t)
        got, _ = r.get("s0", "s1", "d", meta)
        assert got.dtype == dtype and torch.equal(got, t)

    def test_noncontiguous(self, tcp_pair):
        s, r = tcp_pair
        t = torch.arange(24, dtype=torch.int32).reshape(4, 6).t()
        _, _, meta = s.put("s0", "s1", "nc", t)
        got, _ = r.get("s0", "s1", "nc", meta)
        assert torch.equal(got, t)

    def test_numpy(self, tcp_pair):
        s, r = tcp_pair
        a = np.arange(100, dtype=np.uint32).reshape(10, 10)
        _, _, meta = s.put("s0", "s1", "np", a)
        buf = r.get_buffer("s0", "s1", "np", meta)
        with buf:
            assert np.array_equal(buf.numpy(), a)

    def test_bytes(self, pair):
        s, r = pair
        data = os.urandom(100_000)
        _, _, meta = s.put("s0", "s1", "b", data)
        got, n = r.get("s0", "s1", "b", meta)
        assert got == data and n == len(data)
        _, _, meta = s.put("s0", "s1", "ba", bytearray(b"abc"))
        assert r.get("s0", "s1", "ba", meta) == (b"abc", 3)

    def test_object(self, pair):
        s, r = pair
        obj = {"request": "req-1", "params": {"temperature": 0.7, "stop": ["</s>"]}, "ids": list(range(100)),
               "big": 2**64 - 1, "neg": -(2**63), "none": None, "flag": False}
        _, _, meta = s.put("s0", "s1", "o", obj)
        got, _ = r.get("s0", "s1", "o", meta)
        assert got == obj

    def test_pickle_opt_in(self):
        s, r = make_pair("tcp", pickle_trusted_peers_only=True)
        try:
            _, _, meta = s.put("s0", "s1", "p", {1, 2, 3})
            assert r.get("s0", "s1", "p", meta)[0] == {1, 2, 3}
        finally:
            r.close()
            s.close()
        # A receiver that did not opt in refuses a pickle.
        s, r = make_pair("tcp")
        s._pickle = True
        try:
            _, _, meta = s.put("s0", "s1", "p", {1, 2, 3})
            with pytest.raises(xfer.ObjectError, match="pickle"):
                r.get("s0", "s1", "p", meta)
        finally:
            r.close()
            s.close()

    def test_zero_copy(self, pair):
        s, r = pair
        t = s.alloc_tensor(torch.float32, (256, 256))
        t.copy_(torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256))
        ptr = t.data_ptr()
        before = s.health()["pool_used_bytes"]
        ok, size, meta = s.put("s0", "s1", "zc", t)
        assert ok and size == 256 * 256 * 4
        # Published in place: no second copy in the pool.
        assert s.health()["pool_used_bytes"] == before
        got, _ = r.get("s0", "s1", "zc", meta)
        assert got[255, 255].item() == 256 * 256 - 1 and torch.equal(got.flatten()[:5], torch.arange(5.0))
        assert ptr != got.data_ptr()

    def test_zero_copy_view_is_copied(self, tcp_pair):
        # A slice of an alloc_tensor is not the whole buffer: it is copied.
        s, r = tcp_pair
        t = s.alloc_tensor(torch.int32, (10,))
        t.copy_(torch.arange(10, dtype=torch.int32))
        _, size, meta = s.put("s0", "s1", "slice", t[2:5])
        assert size == 12
        assert torch.equal(r.get("s0", "s1", "slice", meta)[0], torch.tensor([2, 3, 4], dtype=torch.int32))

    def test_large_payload(self):
        s, r = make_pair("tcp", pool=128 * MiB)
        try:
            t = torch.randint(0, 255, (100 * MiB,), dtype=torch.uint8)
            _, _, meta = s.put("s0", "s1", "large", t)
            got, n = r.get("s0", "s1", "large", meta)
            assert n == 100 * MiB and tensor_md5(got) == tensor_md5(t)
            del got
        finally:
            r.close()
            s.close()

    def test_mixed_types(self, pair):
        s, r = pair
        values = [torch.ones(7, dtype=torch.int64), b"raw", {"k": "v"}, ["a", 1], np.zeros(3, dtype=np.float64), b""]
        metas = [s.put("s0", "s1", f"m{i}", v)[2] for i, v in enumerate(values)]
        for i, (v, m) in enumerate(zip(values, metas)):
            got, _ = r.get("s0", "s1", f"m{i}", m)
            if isinstance(v, torch.Tensor):
                assert torch.equal(got, v)
            elif isinstance(v, np.ndarray):
                assert np.array_equal(got.numpy(), v)
            else:
                assert got == v

    def test_metadata_optional(self, tcp_pair):
        # No metadata: the receiver's sender_host and sender_zmq_port.
        s, r = tcp_pair
        s.put("s0", "s1", "nm", b"no metadata")
        assert r.get("s0", "s1", "nm") == (b"no metadata", 11)
        s.put("s0", "s1", "po", b"producer only")
        assert r.get("s0", "s1", "po", {"producer": s.address}) == (b"producer only", 13)

    def test_consumers_and_retain(self, tcp_pair):
        s, r = tcp_pair
        _, _, meta = s.put("s0", "s1", "two", b"for two", consumers=2)
        assert r.get("s0", "s1", "two", meta) == (b"for two", 7)
        assert r.get("s0", "s1", "two", meta) == (b"for two", 7)
        r._get_timeout = 0.2
        assert r.get("s0", "s1", "two", meta) is None  # taken twice: gone
        _, _, meta = s.put("s0", "s1", "kept", b"retained", retain=True)
        for _ in range(3):
            assert r.get("s0", "s1", "kept", meta) == (b"retained", 8)
        assert s.cleanup("kept")
        assert r.get("s0", "s1", "kept", meta) is None

    def test_missing_key(self, tcp_pair):
        s, r = tcp_pair
        r._get_timeout = 0.2
        assert r.get("s0", "s1", "never", {"producer": s.address}) is None
        assert r.get_with_deadline("s0", "s1", "never", None, time.monotonic() + 0.2) is None
        assert r.get_with_deadline("s0", "s1", "never", None, time.monotonic() - 1) is None

    def test_get_with_deadline(self, tcp_pair):
        s, r = tcp_pair
        _, _, meta = s.put("s0", "s1", "dl", b"in time")
        assert r.get_with_deadline("s0", "s1", "dl", meta, time.monotonic() + 20) == (b"in time", 7)

    def test_concurrency(self, pair):
        s, r = pair
        n = 16
        errors = []

        def worker(i):
            try:
                t = torch.full((1000,), i, dtype=torch.int32)
                _, _, meta = s.put("s0", "s1", f"c{i}", t)
                got, _ = r.get("s0", "s1", f"c{i}", meta)
                assert torch.equal(got, t)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors

    def test_get_releases_gil(self, tcp_pair):
        # A get waiting for a key that this thread puts later: if the
        # blocking call held the GIL, the put could not run and the get
        # would end empty at its timeout.
        s, r = tcp_pair
        out = []
        started = threading.Event()

        def getter():
            started.set()
            out.append(r.get_with_deadline("s0", "s1", "gil", {"producer": s.address}, time.monotonic() + 60))

        th = threading.Thread(target=getter)
        th.start()
        started.wait()
        while r.health()["gets"] == 0 and s.health()["waiting"] == 0:
            time.sleep(0.01)  # the get reached the producer and waits there
        ok, _, _ = s.put("s0", "s1", "gil", b"put while the get blocked")
        th.join()
        assert ok and out == [(b"put while the get blocked", 25)]


class TestLifecycle:
    def test_close(self):
        s, r = make_pair("tcp")
        s.close()
        r.close()
        assert s.closed and r.closed
        assert s.health()["status"] == "closed"
        with pytest.raises(xfer.ClosedError):
            s.put("a", "b", "k", b"x")
        with pytest.raises(xfer.ClosedError):
            r.get("a", "b", "k")

    def test_context_manager(self):
        with xfer.Connector({"role": "sender", "protocol": "tcp"}) as s:
            assert s.health()["status"] == "healthy"
        assert s.closed

    def test_double_close(self):
        s = xfer.Connector({"role": "dual", "protocol": "tcp"})
        s.close()
        s.close()
        with s:
            pass

    def test_close_fails_waiting_get(self, tcp_pair):
        s, r = tcp_pair
        out = []

        def getter():
            try:
                out.append(r.get_buffer("s0", "s1", "never", {"producer": s.address}, timeout=60))
            except xfer.XferError as e:
                out.append(e)

        th = threading.Thread(target=getter)
        th.start()
        while s.health()["waiting"] == 0:
            time.sleep(0.01)
        r.close()
        th.join()
        assert isinstance(out[0], xfer.ClosedError)

    def test_fork_child_gets_an_error(self, tcp_pair):
        s, _ = tcp_pair
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: every call must raise ForkError, not hang
            try:
                try:
                    s.put("a", "b", "k", b"x")
                    msg = b"no error"
                except xfer.ForkError as e:
                    msg = b"ForkError: " + str(e).encode()
                os.write(wfd, msg)
            finally:
                os._exit(0)
        os.close(wfd)
        msg = os.read(rfd, 4096)
        os.close(rfd)
        os.waitpid(pid, 0)
        assert msg.startswith(b"ForkError: ") and b"forked" in msg
        assert s.put("a", "b", "k", b"parent still works")[0]

    def test_close_sender_first(self):
        # The receiver's close syncs with a sender that has gone: it must
        # not hang (a write error under the stream's lock once deadlocked).
        t = torch.ones(16 * MiB // 4)
        for i in range(8):
            s, r = make_pair("tcp", pool=48 * MiB, wait_for_memory=True)
            for j in range(3):
                _, _, meta = s.put("s0", "s1", f"k{j}", t)
                got, _ = r.get("s0", "s1", f"k{j}", meta)
                del got
            s.close()
            th = threading.Thread(target=r.close, daemon=True)
            th.start()
            th.join(60)
            assert not th.is_alive(), f"round {i}: the receiver's close hung after the sender closed"

    def test_unreachable_producer(self):
        with xfer.Connector({"role": "receiver", "protocol": "tcp", "get_timeout": 5}) as r:
            with pytest.raises(xfer.XferError) as e:
                r.get_buffer("a", "b", "k", {"producer": "127.0.0.1:1"})
            assert "127.0.0.1:1" in str(e.value)


def _require_cuda():
    """Skips a test that needs a CUDA GPU where torch sees none; fails it
    instead under XFER_REQUIRE_CUDA=1 (the GPU machine's run)."""
    if torch.cuda.is_available():
        return
    if os.environ.get("XFER_REQUIRE_CUDA") == "1":
        pytest.fail("XFER_REQUIRE_CUDA=1 but torch sees no CUDA GPU")
    pytest.skip("CUDA is not available")


@pytest.fixture(params=["tcp", "shm"])
def gpu_pair(request):
    _require_cuda()
    s, r = make_pair(request.param, pool=256 * MiB, memory_pool_device="cuda:0")
    yield s, r
    r.close()
    s.close()


class TestGPUPool:
    """vLLM-Omni's TestGPUPool: a pool on the GPU, puts of CPU and GPU
    tensors, and an end-to-end transfer whose get is a CUDA tensor on the
    receiver's GPU pool (shm: CUDA IPC, no host copy; tcp: staged)."""

    def test_gpu_pool_init(self):
        _require_cuda()
        with xfer.Connector({"role": "sender", "memory_pool_device": "cuda", "memory_pool_size": 16 * MiB}) as c:
            assert c.device == "cuda:0"
            t = c.alloc_tensor(torch.float32, (256,))
            assert t.device.type == "cuda"
            t.fill_(3.0)
            assert float(t.sum()) == 768.0

    def test_put_cpu_tensor(self, gpu_pair):
        s, r = gpu_pair
        t = torch.randn(1024)
        ok, size, meta = s.put("s0", "s1", "cpu", t)
        assert ok and size == t.numel() * 4
        got, _ = r.get("s0", "s1", "cpu", meta)
        assert got.device.type == "cuda" and torch.equal(got.cpu(), t)

    def test_put_gpu_tensor(self, gpu_pair):
        s, r = gpu_pair
        t = torch.randn(64, 1024, device="cuda")
        ok, _, meta = s.put("s0", "s1", "gpu", t)
        assert ok
        got, _ = r.get("s0", "s1", "gpu", meta)
        assert got.device.type == "cuda" and got.shape == t.shape and torch.equal(got, t)

    @pytest.mark.parametrize("n", [1, 1 << 18, 16 << 20])
    def test_gpu_e2e(self, gpu_pair, n):
        s, r = gpu_pair
        t = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device="cuda").view(torch.float32)
        digest = hashlib.md5(t.cpu().numpy().tobytes()).hexdigest()
        _, _, meta = s.put("s0", "s1", f"e2e{n}", t)
        got, _ = r.get("s0", "s1", f"e2e{n}", meta)
        assert got.is_cuda and hashlib.md5(got.cpu().numpy().tobytes()).hexdigest() == digest

    def test_zero_copy_gpu(self, gpu_pair):
        s, r = gpu_pair
        t = s.alloc_tensor(torch.bfloat16, (4, 256))
        assert t.is_cuda
        t.copy_(torch.arange(1024, device="cuda").reshape(4, 256).to(torch.bfloat16))
        _, _, meta = s.put("s0", "s1", "zc", t)
        got, _ = r.get("s0", "s1", "zc", meta)
        assert got.dtype == torch.bfloat16 and torch.equal(got, torch.arange(1024, device="cuda").reshape(4, 256).to(torch.bfloat16))

    def test_bytes_and_objects(self, gpu_pair):
        s, r = gpu_pair
        _, _, m1 = s.put("s0", "s1", "b", b"hello gpu")
        _, _, m2 = s.put("s0", "s1", "o", {"a": [1, 2.5, "x"]})
        assert r.get("s0", "s1", "b", m1)[0] == b"hello gpu"
        assert r.get("s0", "s1", "o", m2)[0] == {"a": [1, 2.5, "x"]}

    def test_managed_buffer_gpu(self, gpu_pair):
        s, r = gpu_pair
        t = torch.arange(100, dtype=torch.float32, device="cuda")
        _, _, meta = s.put("s0", "s1", "mb", t)
        with r.get_buffer("s0", "s1", "mb", meta) as buf:
            assert buf.device == "cuda:0"
            assert buf.tensor.is_cuda and torch.equal(buf.tensor, t)
            assert (buf.numpy() == t.cpu().numpy()).all()
            assert buf.tobytes() == t.cpu().numpy().tobytes()
        assert buf.released

    def test_host_pool_takes_gpu_tensor(self, tcp_pair):
        _require_cuda()
        s, r = tcp_pair
        t = torch.randn(4096, device="cuda")
        _, _, meta = s.put("s0", "s1", "d2h", t)
        got, _ = r.get("s0", "s1", "d2h", meta)
        assert not got.is_cuda and torch.equal(got, t.cpu())

    def test_concurrent(self, gpu_pair):
        s, r = gpu_pair
        errs = []

        def work(w):
            try:
                for i in range(5):
                    t = torch.randn(1 << 18, device="cuda")
                    _, _, meta = s.put("s0", "s1", f"c{w}-{i}", t)
                    got, _ = r.get("s0", "s1", f"c{w}-{i}", meta)
                    if not torch.equal(got, t):
                        errs.append(f"{w}/{i}: wrong bytes")
                    del got
            except Exception as e:  # noqa: BLE001 (reported below)
                errs.append(repr(e))
        ths = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120)
        assert not errs


def test_gpu_pool_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: TestGPUPool runs")
    with pytest.raises(xfer.XferError, match="CUDA is not available"):
        xfer.Connector({"role": "sender", "memory_pool_device": "cuda:0"})
    with pytest.raises(xfer.InvalidError, match="memory_pool_device"):
        xfer.Connector({"role": "sender", "memory_pool_device": "tpu:0"})


@pytest.mark.slow
class TestStressCorrectness:
    def test_concurrent_put_get_md5(self, pair):
        s, r = pair
        n, errors = 200, []
        sums = {}

        def producer():
            for i in range(n):
                t = torch.randint(0, 255, (random.randint(1, 256 << 10),), dtype=torch.uint8)
                sums[i] = tensor_md5(t)
                ok, _, _ = s.put("s0", "s1", f"k{i}", t)
                if not ok:
                    errors.append(f"put {i} failed")

        def consumer():
            for i in range(n):
                got = r.get_with_deadline("s0", "s1", f"k{i}", {"producer": s.address}, time.monotonic() + 60)
                if got is None:
                    errors.append(f"get {i}: nothing")
                    continue
                if tensor_md5(got[0]) != sums.get(i):
                    errors.append(f"get {i}: MD5 mismatch")

        threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors

    def test_bidirectional(self):
        a = xfer.Connector({"role": "dual", "protocol": "tcp", "memory_pool_size": 64 * MiB})
        b = xfer.Connector({"role": "dual", "protocol": "tcp", "memory_pool_size": 64 * MiB})
        errors = []

        def run(src, dst, tag):
            for i in range(100):
                data = os.urandom(random.randint(0, 100_000))
                _, _, meta = src.put(tag, "x", str(i), data)
                got = dst.get(tag, "x", str(i), meta)
                if got is None or got[0] != data:
                    errors.append(f"{tag} {i}")

        try:
            ts = [threading.Thread(target=run, args=(a, b, "ab")), threading.Thread(target=run, args=(b, a, "ba"))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errors
        finally:
            a.close()
            b.close()

    def test_edge_cases(self, pair):
        s, r = pair
        for key, v in [("one", torch.tensor([3.5])), ("scalar", torch.tensor(7, dtype=torch.int64)),
                       ("empty-tensor", torch.zeros((0, 4))), ("empty-bytes", b""), ("empty-object", {})]:
            _, size, meta = s.put("s0", "s1", key, v)
            got, n = r.get("s0", "s1", key, meta)
            assert n == size
            if isinstance(v, torch.Tensor):
                assert got.shape == v.shape and torch.equal(got, v)
            else:
                assert got == v

    def test_500mb(self):
        s, r = make_pair("shm", pool=520 * MiB)
        try:
            t = s.alloc_tensor(torch.uint8, (500 * MiB,))
            t.random_(0, 255)
            want = tensor_md5(t)
            _, _, meta = s.put("s0", "s1", "huge", t)
            del t
            got, n = r.get("s0", "s1", "huge", meta)
            assert n == 500 * MiB and tensor_md5(got) == want
            del got
        finally:
            r.close()
            s.close()

    def test_rapid_alloc_free(self, sender):
        for i in range(2000):
            t = sender.alloc_tensor(torch.float32, (random.randint(1, 4096),))
            t.fill_(i)
            del t
        assert sender.health()["pool_used_bytes"] == 0


# A producer that stops (SIGSTOP: its process alive, its connection open,
# silent) fails a get within the engine's op_timeout, although get_timeout
# (30 s by default) is far longer: the get probes its producer each seven
# eighths of op_timeout. get returns None, as for a key not put in time.
def test_stopped_producer_fails_get_within_op_timeout():
    import signal
    import subprocess
    import sys
    code = ("import time, xfer\n"
            "s = xfer.Connector({'role': 'sender', 'host': '127.0.0.1', 'zmq_port': 0, 'protocol': 'tcp',"
            " 'memory_pool_size': 16 << 20})\n"
            "print(s.address, flush=True)\n"
            "time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        addr = p.stdout.readline().decode().strip()
        host, port = addr.rsplit(":", 1)
        with xfer.Connector({"role": "receiver", "protocol": "tcp", "memory_pool_size": 16 * MiB,
                             "sender_host": host, "sender_zmq_port": int(port),
                             "engine": {"op_timeout": "2s"}}) as r:
            with pytest.raises(xfer.NotFoundError):  # connected while the producer runs
                r.get_buffer("a", "b", "k", no_wait=True)
            os.kill(p.pid, signal.SIGSTOP)
            start = time.monotonic()
            got = r.get("a", "b", "k")
            took = time.monotonic() - start
            assert got is None
            assert took < 2 + 2, f"a get from a stopped producer took {took:.1f}s; want within op_timeout (2s)"
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()
