"""The pool and its managed buffers, after the classes of vLLM-Omni's
Mooncake connector buffer tests: TestBufferAllocator, TestManagedBuffer
and (slow) TestAllocatorInvariants."""

import gc
import threading

import numpy as np
import pytest
import torch

import xfer
from conftest import MiB


def used(c):
    return c.health()["pool_used_bytes"]


@pytest.fixture
def pool():
    c = xfer.Connector({"role": "dual", "protocol": "tcp", "memory_pool_size": 4 * MiB})
    yield c
    c.close()


class TestBufferAllocator:
    def test_alloc_free(self, pool):
        b = pool.alloc_buffer(1000)
        assert len(b) == 1000 and used(pool) >= 1000
        b.release()
        assert b.released and used(pool) == 0

    def test_alloc_tensor_free_on_garbage(self, pool):
        t = pool.alloc_tensor(torch.float32, (1024,))
        assert used(pool) == 4096
        del t
        gc.collect()
        assert used(pool) == 0

    def test_alignment(self, pool):
        bufs = [pool.alloc_buffer(n) for n in (1, 3, 63, 64, 65, 1000, 4097)]
        try:
            for b in bufs:
                assert b.address % 64 == 0, hex(b.address)
        finally:
            for b in bufs:
                b.release()

    def test_exhaustion_and_recovery(self, pool):
        bufs = [pool.alloc_buffer(1 * MiB) for _ in range(4)]
        with pytest.raises(xfer.PoolExhaustedError, match="no room"):
            pool.alloc_buffer(1 * MiB)
        with pytest.raises(xfer.TooLargeError):
            pool.alloc_buffer(5 * MiB)
        bufs.pop().release()
        b = pool.alloc_buffer(1 * MiB)
        for x in bufs + [b]:
            x.release()
        assert used(pool) == 0

    def test_thread_safety(self, pool):
        errors = []

        def worker(i):
            try:
                for _ in range(50):
                    b = pool.alloc_buffer(4096 + i)
                    mv = b.memoryview()
                    mv[:] = bytes([i]) * len(mv)
                    if mv.tobytes() != bytes([i]) * len(mv):
                        errors.append(f"thread {i}: overwritten")
                    b.release()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors and used(pool) == 0


@pytest.mark.slow
class TestAllocatorInvariants:
    def test_double_free(self, pool):
        b = pool.alloc_buffer(1 * MiB)
        b.release()
        b.release()
        assert used(pool) == 0
        c = pool.alloc_buffer(4 * MiB)  # the whole pool: nothing counted twice
        c.release()
        with pytest.raises(xfer.ReleasedError):
            b.memoryview()

    def test_no_overlap(self, pool):
        bufs = [pool.alloc_buffer(n) for n in range(1000, 60000, 1999)]
        for i, b in enumerate(bufs):
            b.memoryview()[:] = bytes([i % 256]) * len(b)
        for i, b in enumerate(bufs):
            assert b.tobytes() == bytes([i % 256]) * len(b), f"block {i} was overwritten"
            b.release()
        assert used(pool) == 0

    def test_adjacent_blocks_merge(self, pool):
        bufs = [pool.alloc_buffer(1 * MiB) for _ in range(4)]
        order = sorted(bufs, key=lambda b: b.address)
        order[1].release()
        order[2].release()
        two = pool.alloc_buffer(2 * MiB)  # only the two freed neighbours, merged, hold it
        assert two.address == order[1].address
        two.release()
        order[0].release()
        order[3].release()
        assert used(pool) == 0

    def test_fragmentation(self, pool):
        small = [pool.alloc_buffer(256 << 10) for _ in range(16)]
        for b in small[::2]:
            b.release()
        with pytest.raises(xfer.PoolExhaustedError):
            pool.alloc_buffer(1 * MiB)  # 2 MiB free, in 256 KiB holes
        for b in small[1::2]:
            b.release()
        whole = pool.alloc_buffer(4 * MiB)  # all merged again
        whole.release()


class TestManagedBuffer:
    def test_tensor_views(self, pool):
        ok, _, meta = pool.put("a", "b", "v", torch.arange(12, dtype=torch.int32).reshape(3, 4))
        assert ok
        with pool.get_buffer("a", "b", "v", meta) as buf:
            t, a, mv = buf.tensor, buf.numpy(), buf.memoryview()
            assert t.shape == (3, 4) and a.shape == (3, 4) and len(mv) == 48
            a[0, 0] = 99  # one memory under all three views
            assert t[0, 0].item() == 99 and mv[0] == 99
            assert buf.address == t.data_ptr() == a.ctypes.data
            assert buf.dtype == "I32" and buf.shape == (3, 4)

    # The receiver's pool alone: a sender frees its copy when the
    # receiver's release reaches it, a moment after the get.
    def test_context_manager_releases(self, tcp_pair):
        s, r = tcp_pair
        _, _, meta = s.put("a", "b", "cm", b"x" * 10000)
        with r.get_buffer("a", "b", "cm", meta) as buf:
            assert buf.tobytes() == b"x" * 10000
            assert used(r) > 0
        assert buf.released and used(r) == 0
        with pytest.raises(xfer.ReleasedError):
            buf.tensor

    def test_get_tensor_keeps_memory(self, tcp_pair):
        s, r = tcp_pair
        _, _, meta = s.put("a", "b", "keep", torch.ones(1024))
        t, _ = r.get("a", "b", "keep", meta)
        view = t[10:20]
        del t
        gc.collect()
        assert used(r) == 4096  # the view holds the buffer
        assert view.sum().item() == 10
        del view
        gc.collect()
        assert used(r) == 0

    def test_numpy_alloc(self, pool):
        a = pool.alloc_tensor(np.float64, (8,))
        assert isinstance(a, np.ndarray)
        a[:] = np.arange(8)
        ok, _, meta = pool.put("a", "b", "npz", a)
        assert ok and used(pool) == 64  # published in place
        got, _ = pool.get("a", "b", "npz", meta)
        assert np.array_equal(got.numpy(), np.arange(8.0))

    def test_put_buffer(self, pool):
        b = pool.alloc_buffer(5)
        b.memoryview()[:] = b"hello"
        ok, size, meta = pool.put("a", "b", "mb", b)
        assert ok and size == 5 and b.released
        assert pool.get("a", "b", "mb", meta) == (b"hello", 5)
        with pytest.raises(xfer.ReleasedError):
            pool.put("a", "b", "mb2", b)
