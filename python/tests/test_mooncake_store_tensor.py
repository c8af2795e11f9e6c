"""The tensor calls of xfer.mooncake.store's MooncakeDistributedStore.

First the stored form with no store: its metadata block byte by byte, every
dtype through _serialize_tensor / _deserialize_tensor, and the clear errors
for bytes that are not a stored tensor. Then every tensor call twice: over
an in-memory stand-in for the store's byte calls ("memory"), and between
two clients of a real `xfer mooncake master` ("master").
"""

import ctypes
import re
import struct
import subprocess
import sys
import uuid

import pytest

from xfer.mooncake import _tensor as T
from xfer.mooncake import store as mcs

MASTER_BANNER = "xfer mooncake master: listening on "


# -- the metadata block, no torch -------------------------------------------

def by_hand(dtype, ndim, layout_kind, data_bytes, gshape, lshape, axes=()):
    """The metadata block written field by field at Mooncake's offsets."""
    b = bytearray(304)
    struct.pack_into("<I", b, 0, 0x4D4F4F4E)
    struct.pack_into("<HH", b, 4, 1, 304)
    struct.pack_into("<iiII", b, 8, dtype, ndim, layout_kind, 0)
    struct.pack_into("<QQ", b, 24, 304, data_bytes)
    struct.pack_into("<8q", b, 40, *(list(gshape) + [-1] * (8 - len(gshape))))
    struct.pack_into("<8q", b, 104, *(list(lshape) + [-1] * (8 - len(lshape))))
    struct.pack_into("<II", b, 168, len(axes), 0)
    for i, a in enumerate(axes):
        struct.pack_into("<iiiiiiq", b, 176 + 32 * i, *a)
    return bytes(b)


def test_metadata_layout():
    assert mcs._tensor_metadata_size() == T.METADATA_SIZE == 304
    assert T.pack_metadata(0, (2, 3)) == by_hand(0, 2, 0, 24, (2, 3), (2, 3))
    assert T.pack_metadata(10, ()) == by_hand(10, 0, 0, 1, (), ())
    assert T.pack_metadata(12, (4, 0, 6)) == by_hand(12, 3, 0, 0, (4, 0, 6), (4, 0, 6))
    shard = T.pack_metadata(12, (4, 5, 6), (2, 5, 6), layout_kind=T.LAYOUT_SHARD,
                            axes=[(T.AXIS_TP, 0, 1, 2, 0, 0, 2)])
    assert shard == by_hand(12, 3, 1, 120, (4, 5, 6), (2, 5, 6), [(1, 0, 1, 2, 0, 0, 2)])
    m = T.parse_metadata(shard + bytes(120), 424)
    assert (m.dtype_name, m.shape, m.global_shape, m.layout_kind, m.data_offset, m.data_bytes) == \
        ("bfloat16", (2, 5, 6), (4, 5, 6), 1, 304, 120)
    assert m.axes == ((1, 0, 1, 2, 0, 0, 2),)


def test_dtype_codes_are_mooncakes():
    assert T.DTYPES == ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                        "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def field(b, off, fmt, v):
    b = bytearray(b)
    struct.pack_into(fmt, b, off, v)
    return bytes(b)


GOOD = T.pack_metadata(6, (2, 3)) + bytes(24)  # int32[2, 3]


@pytest.mark.parametrize("blob, total, want", [
    (GOOD[:100], 100, "shorter than the 304-byte metadata"),
    (GOOD[:303], 303, "shorter than the 304-byte metadata"),
    (field(GOOD, 0, "<I", 0x12345678), 328, "magic 0x12345678"),
    (field(GOOD, 4, "<H", 2), 328, "version 2"),
    (field(GOOD, 8, "<i", 15), 328, "dtype code 15 unknown"),
    (field(GOOD, 8, "<i", -1), 328, "dtype code -1 unknown"),
    (field(GOOD, 12, "<i", 9), 328, "ndim 9 out of range"),
    (field(GOOD, 12, "<i", -1), 328, "ndim -1 out of range"),
    (field(GOOD, 16, "<I", 2), 328, "layout kind 2 unknown"),
    (field(GOOD, 168, "<I", 5), 328, "5 layout axes"),
    (GOOD[:-4], 324, "24 data bytes in the metadata, 20 stored"),
    (GOOD + bytes(4), 332, "24 data bytes in the metadata, 28 stored"),
    (field(field(GOOD, 32, "<Q", 28), 40 + 8, "<q", 3) + bytes(4), 332, "28 data bytes for int32[2, 3]"),
    (field(GOOD, 48, "<q", -2), 328, "negative dim"),
    (field(GOOD, 56, "<q", 7), 328, "dims past ndim 2 are not -1"),
    (field(GOOD, 24, "<Q", 100), 328, "data offset 100"),
    (field(field(GOOD, 168, "<I", 1), 176, "<i", 9), 328, "layout axis 0"),
])
def test_bad_metadata(blob, total, want):
    with pytest.raises(ValueError, match=re.escape(want)):
        T.parse_metadata(blob, total)


def test_package_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # import torch raises ImportError
            "import xfer.mooncake.store as s\n"
            "assert s._tensor_metadata_size() == 304\n"
            "st = s.MooncakeDistributedStore()\n"
            "assert st.put_tensor('k', [1]) == s.INVALID_PARAMS and 'not a torch tensor' in st.last_error\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- serialization, with torch ----------------------------------------------

def torch_or_skip():
    return pytest.importorskip("torch")


def samples(torch):
    """(name, tensor) of every dtype this torch has, and shapes that matter."""
    out = []
    for name in T.DTYPES:
        dt = getattr(torch, name, None)
        if dt is None:
            continue
        base = torch.arange(-6, 18, dtype=torch.float32).reshape(2, 3, 4)
        if name == "bool":
            t = base > 3
        elif name.startswith("uint"):
            t = (base + 6).to(dt)
        else:
            t = base.to(dt)
        out.append((name, t))
    f = torch.float32
    out += [("scalar", torch.tensor(3.5)), ("zero-1d", torch.empty((0,), dtype=f)),
            ("zero-f16", torch.empty((0, 4096), dtype=torch.float16)),
            ("zero-bf16", torch.empty((2, 0, 3), dtype=torch.bfloat16)),
            ("zero-i64", torch.empty((1, 0), dtype=torch.int64)),
            ("8-dims", torch.arange(256, dtype=torch.int16).reshape(2, 2, 2, 2, 2, 2, 2, 2)),
            ("transposed", torch.arange(12, dtype=f).reshape(3, 4).t()), ("rand", torch.rand(1000))]
    return out


def same(a, b):
    """a is a CPU tensor of b's dtype, shape and bytes."""
    torch = torch_or_skip()
    if a is None or a.device.type != "cpu" or a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    b = b.detach().cpu()
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def test_serialize_round_trip():
    torch = torch_or_skip()
    for name, t in samples(torch):
        meta, ptr, n, owner = mcs._serialize_tensor(t)
        assert len(meta) == 304 and n == t.numel() * t.element_size(), name
        assert ptr == owner.data_ptr() and owner.is_contiguous(), name
        payload = meta + ctypes.string_at(ptr, n)
        m = T.parse_metadata(payload, len(payload))
        assert m.shape == tuple(t.shape) and m.dtype_name == str(t.dtype).split(".")[1], name
        back = mcs._deserialize_tensor(payload)
        assert same(back, t), name
        assert same(mcs._deserialize_tensor(bytearray(payload)), t), name


def test_deserialize_errors():
    torch = torch_or_skip()
    meta, ptr, n, _ = mcs._serialize_tensor(torch.arange(6, dtype=torch.int32))
    payload = meta + ctypes.string_at(ptr, n)
    for bad, want in [(b"", "empty"), (payload[:200], "shorter than the 304-byte metadata"),
                      (payload[:-1], "24 data bytes in the metadata, 23 stored"),
                      (field(payload, 8, "<i", 99), "dtype code 99 unknown"),
                      (field(payload, 12, "<i", 12), "ndim 12 out of range")]:
        with pytest.raises(ValueError, match="invalid serialized Mooncake tensor payload: .*" + re.escape(want)):
            mcs._deserialize_tensor(bad)
    for bad in ([1, 2], b"abc", None):
        with pytest.raises(ValueError, match="not a torch tensor"):
            mcs._serialize_tensor(bad)
    if hasattr(torch, "complex64"):
        with pytest.raises(ValueError, match="not one Mooncake stores"):
            mcs._serialize_tensor(torch.zeros(2, dtype=torch.complex64))


# -- the tensor calls, over a store ------------------------------------------

class MemoryStore(mcs.MooncakeDistributedStore):
    """The store's byte calls over a dict: the tensor calls, which use only
    these, run on it as on a real store."""

    def __init__(self):
        super().__init__()
        self.kv = {}

    def _missing(self, key):
        self.last_error = f"mooncake store: {key!r}: not found"
        return mcs.OBJECT_NOT_FOUND

    def _put(self, key, ptr, size, config, staged, upsert):
        if key in self.kv and not upsert:
            return mcs.OBJECT_ALREADY_EXISTS
        self.kv[key] = ctypes.string_at(ptr, size)
        return 0

    def _put_many(self, keys, ptrs, sizes, config, staged, upsert):
        return [self._put(k, int(p), int(s), config, staged, upsert) for k, p, s in zip(keys, ptrs, sizes)]

    def _buffer(self, key):
        v = self.kv.get(key)
        return self._missing(key) if v is None else (ctypes.c_ubyte * len(v)).from_buffer_copy(v)

    def get(self, key):
        return self.kv.get(key, b"")

    def get_into(self, key, buffer_ptr, size):
        v = self.kv.get(key)
        if v is None:
            return self._missing(key)
        if len(v) > size:
            self.last_error = f"mooncake store: {key!r}: {len(v)} bytes, a buffer of {size}"
            return mcs.BUFFER_OVERFLOW
        ctypes.memmove(int(buffer_ptr), v, len(v))
        return len(v)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        return [self.get_into(k, p, s) for k, p, s in zip(keys, buffer_ptrs, sizes)]

    def get_size(self, key):
        v = self.kv.get(key)
        return self._missing(key) if v is None else len(v)

    def register_buffer(self, buffer_ptr, size):
        return 0

    def unregister_buffer(self, buffer_ptr):
        return 0

    def remove(self, key, force=False):
        return 0 if self.kv.pop(key, None) is not None else mcs.OBJECT_NOT_FOUND

    def close(self):
        return 0


@pytest.fixture(scope="module")
def master(go_xfer):
    p = subprocess.Popen([go_xfer, "mooncake", "master", "--rpc_address", "127.0.0.1", "--port", "0",
                          "--metrics_port", "0", "--default_kv_lease_ttl=300"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith(MASTER_BANNER):
        p.kill()
        p.wait()
        pytest.fail(f"xfer mooncake master did not start: {line!r}")
    yield line[len(MASTER_BANNER):].strip()
    p.terminate()
    p.wait(timeout=30)


@pytest.fixture(scope="module")
def master_clients(master):
    clients = []
    for _ in range(2):
        s = mcs.MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", master) == 0, s.last_error
        clients.append(s)
    yield clients
    for s in clients:
        s.close()


@pytest.fixture(params=["memory", "master"])
def rw(request):
    """(writer, reader): one in-memory store twice, or two clients of a
    master (the reader reads what the writer's put)."""
    if request.param == "memory":
        s = MemoryStore()
        return s, s
    return tuple(request.getfixturevalue("master_clients"))


def keys(n=1, tag="t"):
    u = uuid.uuid4().hex[:8]
    return [f"{tag}-{u}-{i}" for i in range(n)]


class Registered:
    """A ctypes buffer registered with a store."""

    def __init__(self, store, size):
        self.store, self.size = store, size
        self.buf = (ctypes.c_ubyte * size)()
        self.ptr = ctypes.addressof(self.buf)
        assert store.register_buffer(self.ptr, size) == 0, store.last_error

    def close(self):
        self.store.unregister_buffer(self.ptr)


def test_not_set_up():
    """A real client before setup: every call fails as the byte calls do."""
    torch = torch_or_skip()
    s = mcs.MooncakeDistributedStore()
    t = torch.arange(4)
    assert s.put_tensor("k", t) == mcs.INVALID_PARAMS and "not set up" in s.last_error
    assert s.batch_upsert_tensor(["k", "l"], [t, t]) == [mcs.INVALID_PARAMS] * 2
    assert s.put_tensor_with_tp("k", t, tp_size=2) == mcs.INVALID_PARAMS
    assert s.get_tensor("k") is None and s.batch_get_tensor(["k"]) == [None]
    assert s.get_tensor_with_tp("k", tp_rank=1, tp_size=2) is None
    assert s.get_tensor_into_cuda("k", t) == mcs.INVALID_PARAMS


def test_put_get_every_dtype(rw):
    torch = torch_or_skip()
    w, r = rw
    for (name, t), k in zip(samples(torch), keys(64)):
        assert w.put_tensor(k, t) == 0, (name, w.last_error)
        got = r.get_tensor(k)
        assert same(got, t), (name, got, t)


def test_stored_form_is_mooncakes(rw):
    torch = torch_or_skip()
    w, r = rw
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    k, k2 = keys(2)
    assert w.put_tensor(k, t) == 0
    raw = r.get(k)
    assert raw == T.pack_metadata(12, (3, 4)) + t.view(torch.uint8).numpy().tobytes()
    # What a Mooncake client wrote (the same bytes, put as a value) reads as a tensor.
    assert w.put(k2, raw) == 0
    assert same(r.get_tensor(k2), t)


def test_not_stored(rw):
    torch = torch_or_skip()
    w, r = rw
    k, raw = keys(2)
    assert r.get_tensor(k) is None and r.last_error
    assert r.batch_get_tensor([k]) == [None]
    assert w.put(raw, b"not a tensor" * 40) == 0
    assert r.get_tensor(raw) is None and "magic" in r.last_error
    assert w.put_tensor(k, [1, 2, 3]) == mcs.INVALID_PARAMS and "not a torch tensor" in w.last_error
    assert w.put_tensor(k, torch.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1)) == mcs.INVALID_PARAMS
    assert "9 dims" in w.last_error


def test_batch_put_get_upsert(rw):
    torch = torch_or_skip()
    w, r = rw
    ks = keys(3)
    ts = [torch.arange(16, dtype=torch.float32).reshape(4, 4), torch.arange(24, dtype=torch.int64).reshape(2, 3, 4),
          torch.empty((0, 2), dtype=torch.float16)]
    assert w.batch_put_tensor(ks, ts) == [0, 0, 0], w.last_error
    for got, t in zip(r.batch_get_tensor(ks), ts):
        assert same(got, t)
    # Upserts replace (keys no one has read: a read's lease may hold a key).
    uk = keys(3)
    new = [t + 1 for t in ts]
    assert w.batch_put_tensor(uk, ts) == [0, 0, 0]
    assert w.batch_upsert_tensor(uk, new) == [0, 0, 0], w.last_error
    assert w.upsert_tensor(uk[0], ts[0] * 3) == 0
    assert w.upsert_tensor(keys()[0], ts[0]) == 0  # upsert inserts too
    assert all(same(g, t) for g, t in zip(r.batch_get_tensor(uk), [ts[0] * 3] + new[1:]))
    # One bad tensor fails alone; mismatched lists fail every key.
    k2 = keys(2)
    assert w.batch_put_tensor(k2, [ts[0], "x"]) == [0, mcs.INVALID_PARAMS]
    assert same(r.get_tensor(k2[0]), ts[0])
    assert w.batch_put_tensor(keys(2), [ts[0]]) == [mcs.INVALID_PARAMS] * 2
    assert w.batch_put_tensor([], []) == []
    cfg = mcs.ReplicateConfig()
    assert w.pub_tensor(keys()[0], ts[0], cfg) == 0
    assert w.batch_pub_tensor(keys(2), ts[:2], config=cfg) == [0, 0]
    assert w.upsert_pub_tensor(keys()[0], ts[1], config=cfg) == 0
    cfg.preferred_segments = ["a", "b"]
    assert w.pub_tensor(keys()[0], ts[0], cfg) == mcs.INVALID_PARAMS and "preferred_segments" in w.last_error


def test_into_and_from(rw):
    torch = torch_or_skip()
    w, r = rw
    t = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    z = torch.empty((2, 0, 3), dtype=torch.float32)
    k, kz, kf, kzf, ku = keys(5)
    assert w.batch_put_tensor([k, kz], [t, z]) == [0, 0]
    rb, wb = Registered(r, 1 << 16), Registered(w, 1 << 16)
    try:
        n = r.get_size(k)
        assert n == 304 + 240
        got = r.get_tensor_into(k, rb.ptr, rb.size)
        assert same(got, t)
        assert got.data_ptr() == rb.ptr + 304  # a view of the registered buffer
        rb.buf[304] = 0xFF
        assert got.view(-1)[0].item() != 0.0
        gz = r.get_tensor_into(kz, rb.ptr + 4096, 4096)
        assert same(gz, z)
        assert r.get_tensor_into(k, rb.ptr, 100) is None and r.last_error
        assert r.get_tensor_into(k, 0, 100) is None
        # put_tensor_from: a buffer holding the stored form.
        ctypes.memmove(wb.ptr, r.get(k), n)
        nz = len(r.get(kz))
        ctypes.memmove(wb.ptr + 4096, r.get(kz), nz)
        kp = keys()[0]
        assert w.put_tensor_from(kp, wb.ptr, n) == 0, w.last_error
        assert same(r.get_tensor(kp), t)
        assert w.put_tensor_from(kf, wb.ptr, n) == 0, w.last_error
        assert w.upsert_tensor_from(kf, wb.ptr + 4096, nz) == 0, w.last_error
        assert same(r.get_tensor(kf), z)
        assert w.batch_put_tensor_from([kzf], [wb.ptr + 4096], [nz]) == [0]
        assert same(r.get_tensor(kzf), z)
        assert w.batch_upsert_tensor_from([ku], [wb.ptr], [n]) == [0]
        assert same(r.get_tensor(ku), t)
        # Not a stored form: nothing is stored.
        bad = keys()[0]
        assert w.put_tensor_from(bad, wb.ptr, n - 1) == mcs.INVALID_PARAMS and "data bytes" in w.last_error
        assert w.put_tensor_from(bad, wb.ptr, 100) == mcs.INVALID_PARAMS
        assert w.put_tensor_from(bad, 0, n) == mcs.INVALID_PARAMS
        assert w.batch_put_tensor_from([bad, keys()[0]], [wb.ptr, wb.ptr], [n, n + 1]) == [mcs.INVALID_PARAMS] * 2
        assert r.get_tensor(bad) is None
        # Several at once, into one buffer.
        got = r.batch_get_tensor_into([k, kz, bad], [rb.ptr, rb.ptr + 8192, rb.ptr + 12288], [4096, 4096, 4096])
        assert same(got[0], t) and same(got[1], z) and got[2] is None
        assert r.batch_get_tensor_into([k], [rb.ptr, rb.ptr], [1]) == [mcs.INVALID_PARAMS]
        assert r.batch_get_tensor_into([k], [0], [4096]) == [mcs.INVALID_PARAMS]
    finally:
        rb.close()
        wb.close()


def test_into_tensor(rw):
    torch = torch_or_skip()
    w, r = rw
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    k, k2 = keys(2)
    assert w.put_tensor(k, t) == 0
    dst = torch.zeros(3, 4, dtype=torch.int32)
    assert r.get_tensor_into_cuda(k, dst) == 48
    assert torch.equal(dst, t)
    assert r.get_tensor_into_cuda(k, torch.zeros(4, 3, dtype=torch.int32)) == mcs.INVALID_PARAMS
    got = r.batch_get_tensor_into_cuda([k, k2], [dst, dst])
    assert got[0] == 48 and got[1] < 0


def test_tensor_parallel(rw):
    torch = torch_or_skip()
    w, r = rw
    t = torch.arange(2 * 8 * 3, dtype=torch.float16).reshape(2, 8, 3)
    k, k2, k3 = keys(3)
    assert w.put_tensor_with_tp(k, t, tp_size=4, split_dim=1) == 0, w.last_error
    for rank in range(4):
        want = t.narrow(1, 2 * rank, 2).contiguous()
        assert same(r.get_tensor_with_tp(k, tp_rank=rank, tp_size=4), want)
        raw = r.get(f"{k}_tp_{rank}")
        m = T.parse_metadata(raw, len(raw))
        assert (m.shape, m.global_shape, m.layout_kind) == ((2, 2, 3), (2, 8, 3), T.LAYOUT_SHARD)
        assert m.axes == ((T.AXIS_TP, 0, rank, 4, 1, 0, 2),)
    assert r.get_tensor(k) is None  # only the shards are stored
    # tp_size 1: the whole tensor under its own key.
    assert w.put_tensor_with_tp(k2, t) == 0
    assert same(r.get_tensor_with_tp(k2), t)
    # Uneven or out-of-range splits store nothing.
    assert w.put_tensor_with_tp(k3, t, tp_size=3, split_dim=1) == mcs.INVALID_PARAMS
    assert "does not split evenly" in w.last_error
    assert w.put_tensor_with_tp(k3, t, tp_size=2, split_dim=3) == mcs.INVALID_PARAMS
    assert r.get_tensor(f"{k3}_tp_0") is None
    # Zero tensors (Mooncake's own case).
    z = torch.empty((2, 0, 3), dtype=torch.float32)
    kz = keys()[0]
    assert w.put_tensor_with_tp(kz, z, tp_size=2, split_dim=0) == 0
    for rank in range(2):
        assert same(r.get_tensor_with_tp(kz, tp_rank=rank, tp_size=2), z.narrow(0, rank, 1).contiguous())
    # Batches.
    bk = keys(3)
    ts = [torch.arange(8, dtype=torch.int64).reshape(4, 2), torch.arange(16, dtype=torch.float32).reshape(2, 8),
          torch.arange(3, dtype=torch.int8)]
    assert w.batch_put_tensor_with_tp(bk, ts, tp_size=2, split_dim=0) == [0, 0, mcs.INVALID_PARAMS]
    for rank in range(2):
        got = r.batch_get_tensor_with_tp(bk[:2], tp_rank=rank, tp_size=2)
        assert same(got[0], ts[0].narrow(0, 2 * rank, 2).contiguous())
        assert same(got[1], ts[1].narrow(0, rank, 1).contiguous())
    rb = Registered(r, 1 << 14)
    try:
        got = r.get_tensor_with_tp_into(k, rb.ptr, 4096, tp_rank=2, tp_size=4)
        assert same(got, t.narrow(1, 4, 2).contiguous())
        got = r.batch_get_tensor_with_tp_into(bk[:2], [rb.ptr, rb.ptr + 4096], [4096, 4096], tp_rank=1, tp_size=2)
        assert same(got[0], ts[0].narrow(0, 2, 2).contiguous()) and same(got[1], ts[1].narrow(0, 1, 1).contiguous())
        # _from: the whole tensor's stored form in memory, sharded on the way.
        raw = r.get(k2)
        ctypes.memmove(rb.ptr + 8192, raw, len(raw))
        kf = keys()[0]
        assert w.put_tensor_with_tp_from(kf, rb.ptr + 8192, len(raw), tp_size=2, split_dim=2) == mcs.INVALID_PARAMS
        assert w.put_tensor_with_tp_from(kf, rb.ptr + 8192, len(raw), tp_size=2, split_dim=0) == 0
        assert same(r.get_tensor_with_tp(kf, tp_rank=1, tp_size=2), t.narrow(0, 1, 1).contiguous())
        assert w.batch_put_tensor_with_tp_from([keys()[0], kf + "x"], [rb.ptr + 8192, rb.ptr + 8192],
                                               [len(raw), len(raw) - 1], tp_size=2) == [0, mcs.INVALID_PARAMS]
    finally:
        rb.close()


def test_cuda_tensors(rw):
    torch = torch_or_skip()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    w, r = rw
    ks = keys(4)
    t = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
    b = torch.arange(24, dtype=torch.bfloat16, device="cuda").reshape(2, 3, 4)
    assert w.put_tensor(ks[0], t) == 0 and w.upsert_tensor(ks[1], b) == 0
    assert w.batch_put_tensor(ks[2:], [b, t]) == [0, 0]
    for k, want in zip(ks, [t, b, b, t]):
        got = r.get_tensor(k)
        assert got.device.type == "cpu" and torch.equal(got, want.cpu())
    dst = torch.zeros(4, 4, dtype=torch.float32, device="cuda")
    assert r.get_tensor_into_cuda(ks[0], dst) == 64 and torch.equal(dst, t)
