"""xfer.mooncake.store: Mooncake's ``mooncake.store`` over xfer.

vLLM-Omni's store connector, SGLang's HiCache, LMCache's Mooncake backend
and vLLM's store connector keep KV caches in Mooncake's distributed store
through one class, ``MooncakeDistributedStore``. This module is that class
over xfer (libxfer's ``xfer_mcs_*`` calls) and `xfer mooncake master`::

    import xfer.mooncake
    xfer.mooncake.install_as_mooncake()
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    store = MooncakeDistributedStore()
    store.setup("10.0.0.2", "P2PHANDSHAKE", 1 << 30, 64 << 20, "tcp", "", "10.0.0.1:50051")
    store.put("k", b"value")
    store.get("k")          # b"value"

As in Mooncake, each client's ``setup`` contributes its
``global_segment_size`` bytes of its own memory to the pool (objects that
any client puts may live there), and its ``local_buffer_size`` bytes stage
the values of ``put`` and ``get``; ``put_from`` and ``get_into`` move
memory registered with ``register_buffer`` directly. Calls return 0 (or a
size or count) or a negative code of Mooncake's store (the constants
below); ``get`` returns ``b""`` for a key it cannot read. The message of
the last failure is in ``MooncakeDistributedStore.last_error``.

The tensor calls (``put_tensor``, ``get_tensor``, their batch, ``_from``,
``_into``, upsert and tensor-parallel ``_with_tp`` forms) store a torch
tensor as Mooncake does: its 304-byte metadata (dtype, shape, layout) and
then its bytes, so either client reads what the other wrote; torch is
imported by those calls only. docs/MOONCAKE.md lists what is compatible and what differs.
"""

import ctypes
import enum
import json
import re
import threading
import weakref

from .. import _lib
from ._tensor import TensorCalls, _deserialize_tensor, _serialize_tensor, _tensor_metadata_size  # noqa: F401

# Mooncake's store error codes (its types.h ErrorCode).
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101
SEGMENT_ALREADY_EXISTS = -102
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
INVALID_WRITE = -700
INVALID_READ = -701
INVALID_REPLICA = -702
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
RPC_FAIL = -900

_ERR_LEN = 4096


class SoftPinAction(enum.IntEnum):
    """What a put does to an object's soft pin (Mooncake's SoftPinAction)."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicaStatus(enum.IntEnum):
    """A replica's state, as Mooncake names them."""
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class ReplicateConfig:
    """How a put places and protects an object: ``replica_num`` replicas
    on distinct segments (``preferred_segment`` / ``preferred_segments``
    first); a soft pin (``soft_pin_action`` ENABLE, or the older
    ``with_soft_pin``: evicted only after unpinned objects, for
    ``soft_pin_ttl_ms`` or the master's default; DISABLE drops it, and
    PRESERVE, the default, keeps what an upsert's object had) or a hard pin
    (``with_hard_pin``: never evicted)."""

    __slots__ = ("replica_num", "_with_soft_pin", "with_hard_pin", "_soft_pin_action", "_soft_pin_ttl_ms",
                 "preferred_segment", "preferred_segments", "prefer_alloc_in_same_node")

    def __init__(self):
        self.replica_num = 1
        self._with_soft_pin = False
        self.with_hard_pin = False
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms = None
        self.preferred_segment = ""
        self.preferred_segments = []
        self.prefer_alloc_in_same_node = False

    @property
    def soft_pin_action(self):
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        self._soft_pin_action = SoftPinAction(v)

    @property
    def with_soft_pin(self):
        return self._with_soft_pin or self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v):
        self._with_soft_pin = bool(v)
        self._soft_pin_action = SoftPinAction.ENABLE if v else SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self):
        """The soft pin's TTL in milliseconds, or None for the master's default."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 64):
            raise TypeError(f"soft_pin_ttl_ms {v!r}: want None or an int from 0 to 2**64-1")
        self._soft_pin_ttl_ms = v

    def _json(self):
        if isinstance(self.replica_num, bool) or not isinstance(self.replica_num, int) or self.replica_num < 1:
            raise ValueError(f"ReplicateConfig.replica_num {self.replica_num!r}: want a positive int")
        action = self._soft_pin_action
        return json.dumps({
            "replica_num": self.replica_num,
            "with_soft_pin": action == SoftPinAction.ENABLE,
            "keep_soft_pin": action == SoftPinAction.PRESERVE and self._soft_pin_ttl_ms is None,
            # A TTL without ENABLE is passed on, for the master to refuse.
            "soft_pin_ttl_ms": int(self._soft_pin_ttl_ms or 0),
            "with_hard_pin": bool(self.with_hard_pin),
            "preferred_segment": self.preferred_segment or "",
            "preferred_segments": list(self.preferred_segments or []),
        }).encode()

    def __str__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, soft_pin_action={self._soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self._soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, preferred_segments={self.preferred_segments!r})")

    __repr__ = __str__


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*$", re.I)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def parse_size(v):
    """A size in bytes from an int or a human-readable string ("16MB",
    "16 MB", "1.5GiB"; units are powers of 1024, as Mooncake's). Raises
    ValueError for anything else (a percentage, a negative number)."""
    if isinstance(v, bool):
        raise ValueError(f"size {v!r}: want a number of bytes or a string such as '16MB'")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"size {v}: negative")
        return v
    m = _SIZE.match(str(v))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"size {v!r}: want a number of bytes or a string such as '16MB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _keys(keys):
    """Concatenated UTF-8 keys and their lengths, for the ABI."""
    bs = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    lens = (ctypes.c_int64 * max(len(bs), 1))(*[len(b) for b in bs])
    return b"".join(bs), lens


def _addr(buf):
    """The address and size of a buffer-protocol object's bytes, and an
    object to keep alive while they are used."""
    if isinstance(buf, bytes):
        return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value, len(buf), buf
    mv = memoryview(buf)
    if not mv.contiguous:
        raise ValueError("a value must be contiguous")
    mv = mv.cast("B")
    if mv.readonly:
        b = bytes(mv)
        return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value, len(b), b
    arr = (ctypes.c_char * len(mv)).from_buffer(mv)
    return ctypes.addressof(arr), len(mv), (arr, mv)


def _buffer_type(n):
    return _BufferTypes.get(n)


class _BufferTypes:
    _cache = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, n):
        with cls._lock:
            t = cls._cache.get(n)
            if t is None:
                t = type("BufferHandle", (ctypes.c_ubyte * n,), {
                    "ptr": lambda self: ctypes.addressof(self),
                    "size": lambda self: len(self),
                    "__repr__": lambda self: f"BufferHandle(size={len(self)})",
                })
                if len(cls._cache) < 1024:
                    cls._cache[n] = t
            return t


class MooncakeDistributedStore(TensorCalls):
    """Mooncake's store client over xfer: see the module's documentation.
    Its tensor calls (put_tensor, get_tensor, ..._with_tp) are in
    _tensor.py."""

    def __init__(self):
        self._h = 0
        self._lock = threading.Lock()
        self.last_error = ""

    # -- plumbing ---------------------------------------------------------

    def _call(self, fn, *args):
        """Calls an xfer_mcs_* export; returns its result, or its negative
        code after keeping its message in last_error."""
        err = ctypes.create_string_buffer(_ERR_LEN)
        h = self._h
        if not h:
            self.last_error = "mooncake store: not set up (setup first, or closed)"
            return INVALID_PARAMS
        r = fn(h, *args, err, _ERR_LEN)
        if r < 0:
            self.last_error = err.value.decode("utf-8", "replace")
        return r

    @staticmethod
    def _lib():
        return _lib.lib()

    # -- life -------------------------------------------------------------

    def setup(self, local_hostname, metadata_server=None, global_segment_size=16 << 20,
              local_buffer_size=16 << 20, protocol="tcp", rdma_devices="", master_server_addr="127.0.0.1:50051",
              engine=None, enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
              enable_client_http_server=False, client_http_port=9300):
        """Sets the client up: 0, or a negative code. Takes Mooncake's
        arguments, or one dict of them (sizes may be human-readable:
        "16MB"). A client may be set up again after close."""
        if isinstance(local_hostname, dict):
            cfg = dict(local_hostname)
            try:
                for k in ("local_hostname", "metadata_server"):
                    if k not in cfg:
                        raise ValueError(f"setup: the config has no {k!r}")
                gs = parse_size(cfg.get("global_segment_size", 16 << 20))
                lb = parse_size(cfg.get("local_buffer_size", 16 << 20))
            except ValueError as e:
                self.last_error = f"mooncake store: {e}"
                return INVALID_PARAMS
            return self.setup(cfg["local_hostname"], cfg["metadata_server"], gs, lb, cfg.get("protocol", "tcp"),
                              cfg.get("rdma_devices", ""), cfg.get("master_server_addr", "127.0.0.1:50051"),
                              enable_ssd_offload=cfg.get("enable_ssd_offload", False),
                              ssd_offload_path=cfg.get("ssd_offload_path", ""))
        if metadata_server is None:
            raise TypeError("setup() missing argument 'metadata_server'")
        if engine is not None:
            self.last_error = "mooncake store: setup with a shared engine: not supported by xfer (each store has its own)"
            return INVALID_PARAMS
        if enable_ssd_offload:
            self.last_error = "mooncake store: enable_ssd_offload: not supported by xfer yet"
            return INVALID_PARAMS
        try:
            gs, lb = parse_size(global_segment_size), parse_size(local_buffer_size)
        except ValueError as e:
            self.last_error = f"mooncake store: {e}"
            return INVALID_PARAMS
        with self._lock:
            if self._h:
                self.last_error = "mooncake store: set up already (close first)"
                return INVALID_PARAMS
            doc = json.dumps({
                "local_hostname": str(local_hostname), "metadata_server": str(metadata_server),
                "global_segment_size": gs, "local_buffer_size": lb, "protocol": str(protocol),
                "rdma_devices": str(rdma_devices or ""), "master_server_addr": str(master_server_addr),
            }).encode()
            h = ctypes.c_int64()
            err = ctypes.create_string_buffer(_ERR_LEN)
            r = self._lib().xfer_mcs_setup(doc, len(doc), ctypes.byref(h), err, _ERR_LEN)
            if r != 0:
                self.last_error = err.value.decode("utf-8", "replace")
                return r
            self._h = h.value
            return 0

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        """Mooncake's older set-up entry point: not supported (use setup)."""
        self.last_error = "mooncake store: init_all: not supported by xfer (use setup)"
        return INVALID_PARAMS

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Mooncake's dummy client (a process sharing a real client's
        memory over IPC): not supported by xfer."""
        self.last_error = "mooncake store: setup_dummy: not supported by xfer"
        return INVALID_PARAMS

    def close(self):
        """Unmounts the client's segment (objects with no replica elsewhere
        are gone) and closes it: 0, or a negative code. Idempotent."""
        with self._lock:
            h, self._h = self._h, 0
        if not h:
            return 0
        err = ctypes.create_string_buffer(_ERR_LEN)
        r = self._lib().xfer_mcs_close(h, err, _ERR_LEN)
        if r != 0:
            self.last_error = err.value.decode("utf-8", "replace")
        return r

    def health_check(self):
        """0 when set up and the master answers; 1 when not set up."""
        if not self._h:
            return 1
        return 0 if self.is_exist("\x00health") >= 0 else 2

    def get_hostname(self):
        """This client's segment name, host:port."""
        out = ctypes.create_string_buffer(512)
        if self._call(self._lib().xfer_mcs_hostname, out, 512) < 0:
            return ""
        return out.value.decode()

    # -- buffers ----------------------------------------------------------

    def register_buffer(self, buffer_ptr, size):
        """Registers [buffer_ptr, +size) of the caller's memory for put_from
        and get_into: 0, or a negative code."""
        return self._call(self._lib().xfer_mcs_register, ctypes.c_void_p(int(buffer_ptr)), int(size))

    def unregister_buffer(self, buffer_ptr):
        return self._call(self._lib().xfer_mcs_unregister, ctypes.c_void_p(int(buffer_ptr)))

    # -- put --------------------------------------------------------------

    def _put(self, key, ptr, size, config, staged, upsert):
        cfg = b"" if config is None else config._json()
        k = key.encode() if isinstance(key, str) else bytes(key)
        return self._call(self._lib().xfer_mcs_put, k, len(k), ctypes.c_void_p(ptr), size, cfg, len(cfg),
                          1 if staged else 0, 1 if upsert else 0)

    def put(self, key, value, config=None):
        """Stores value (bytes or any contiguous buffer) under key: 0, or a
        negative code. A key that exists keeps its value (upsert replaces
        it)."""
        ptr, n, keep = _addr(value)
        r = self._put(key, ptr, n, config, True, False)
        del keep
        return r

    def upsert(self, key, value, config=None):
        """Stores value under key, replacing what it held."""
        ptr, n, keep = _addr(value)
        r = self._put(key, ptr, n, config, True, True)
        del keep
        return r

    def put_parts(self, key, *parts, config=None):
        """Stores the concatenation of parts under key."""
        return self.put(key, b"".join(bytes(memoryview(p).cast("B")) for p in parts), config=config)

    def upsert_parts(self, key, *parts, config=None):
        return self.upsert(key, b"".join(bytes(memoryview(p).cast("B")) for p in parts), config=config)

    def put_from(self, key, buffer_ptr, size, config=None):
        """Stores size bytes of registered memory at buffer_ptr under key."""
        return self._put(key, int(buffer_ptr), int(size), config, False, False)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        return self._put(key, int(buffer_ptr), int(size), config, False, True)

    def _put_many(self, keys, ptrs, sizes, config, staged, upsert):
        n = len(keys)
        if n == 0:
            return []
        if len(ptrs) != n or len(sizes) != n:
            self.last_error = f"mooncake store: {n} keys, {len(ptrs)} buffers, {len(sizes)} sizes"
            return [INVALID_PARAMS] * n
        kb, kl = _keys(keys)
        ps = (ctypes.c_void_p * n)(*[int(p) for p in ptrs])
        ss = (ctypes.c_int64 * n)(*[int(s) for s in sizes])
        codes = (ctypes.c_int64 * n)()
        cfg = b"" if config is None else config._json()
        r = self._call(self._lib().xfer_mcs_put_batch, kb, kl, ps, ss, n, cfg, len(cfg), 1 if staged else 0,
                       1 if upsert else 0, codes)
        if r < 0:
            return [r] * n
        return [int(c) for c in codes]

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        """put_from for each key: a list of codes."""
        return self._put_many(keys, buffer_ptrs, sizes, config, False, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._put_many(keys, buffer_ptrs, sizes, config, False, True)

    def put_batch(self, keys, values, config=None):
        """put for each key: 0 when every one succeeded, else the first
        failure's code."""
        if len(keys) != len(values):
            self.last_error = f"mooncake store: put_batch: {len(keys)} keys, {len(values)} values"
            return INVALID_PARAMS
        held = [_addr(v) for v in values]
        codes = self._put_many(keys, [h[0] for h in held], [h[1] for h in held], config, True, False)
        del held
        return next((c for c in codes if c != 0), 0)

    def upsert_batch(self, keys, values, config=None):
        if len(keys) != len(values):
            self.last_error = f"mooncake store: upsert_batch: {len(keys)} keys, {len(values)} values"
            return INVALID_PARAMS
        held = [_addr(v) for v in values]
        codes = self._put_many(keys, [h[0] for h in held], [h[1] for h in held], config, True, True)
        del held
        return next((c for c in codes if c != 0), 0)

    # -- get --------------------------------------------------------------

    def _get_staged(self, key):
        """(pointer, size, token) of key's value in the local buffer, or a
        negative code."""
        k = key.encode() if isinstance(key, str) else bytes(key)
        p, n, tok = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int64()
        r = self._call(self._lib().xfer_mcs_get, k, len(k), ctypes.byref(p), ctypes.byref(n), ctypes.byref(tok))
        if r < 0:
            return r
        return p.value or 0, n.value, tok.value

    def _release(self, h, token):
        if token and h:
            err = ctypes.create_string_buffer(256)
            self._lib().xfer_mcs_release(h, token, err, 256)

    def get(self, key):
        """key's value as bytes; b"" when it cannot be read (not there,
        evicted, or a failure: see last_error)."""
        got = self._get_staged(key)
        if isinstance(got, int):
            return b""
        p, n, tok = got
        try:
            return ctypes.string_at(p, n) if n else b""
        finally:
            self._release(self._h, tok)

    def get_batch(self, keys):
        """get for each key: a list of bytes (b"" for one that failed)."""
        return [self.get(k) for k in keys]

    def get_buffer(self, key):
        """key's value in the local buffer, as an object of the buffer
        protocol (``bytes(buf)``, ``memoryview(buf)``, ``buf.ptr()``,
        ``buf.size()``) that holds its bytes until it is collected; None
        when it cannot be read."""
        got = self._buffer(key)
        return None if isinstance(got, int) else got

    def _buffer(self, key):
        """get_buffer, or the failure's negative code."""
        got = self._get_staged(key)
        if isinstance(got, int):
            return got
        p, n, tok = got
        if n == 0:
            self._release(self._h, tok)
            return _buffer_type(0)()
        buf = _buffer_type(n).from_address(p)
        weakref.finalize(buf, self._release, self._h, tok)
        return buf

    def batch_get_buffer(self, keys):
        return [self.get_buffer(k) for k in keys]

    def get_into(self, key, buffer_ptr, size):
        """Reads key's value into registered memory at buffer_ptr (size
        bytes): its length, or a negative code (one when it does not fit)."""
        k = key.encode() if isinstance(key, str) else bytes(key)
        return self._call(self._lib().xfer_mcs_get_into, k, len(k), ctypes.c_void_p(int(buffer_ptr)), int(size))

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """get_into for each key: a list of lengths or codes."""
        n = len(keys)
        if n == 0:
            return []
        if len(buffer_ptrs) != n or len(sizes) != n:
            self.last_error = f"mooncake store: {n} keys, {len(buffer_ptrs)} buffers, {len(sizes)} sizes"
            return [INVALID_PARAMS] * n
        kb, kl = _keys(keys)
        ps = (ctypes.c_void_p * n)(*[int(p) for p in buffer_ptrs])
        ss = (ctypes.c_int64 * n)(*[int(s) for s in sizes])
        codes = (ctypes.c_int64 * n)()
        r = self._call(self._lib().xfer_mcs_get_into_batch, kb, kl, ps, ss, n, codes)
        if r < 0:
            return [r] * n
        return [int(c) for c in codes]

    def get_into_ranges(self, buffer_ptrs, keys, dst_offsets, src_offsets, sizes):
        """Reads ranges of values into registered buffers, buffer by
        buffer: for buffer i, key keys[i][j], range k copies
        sizes[i][j][k] bytes from src_offsets[i][j][k] in the value to
        dst_offsets[i][j][k] in the buffer. Returns the same nesting of
        byte counts or negative codes; a key whose ranges' lists differ in
        length fails with one code."""
        out = []
        for i, bptr in enumerate(buffer_ptrs):
            row = []
            try:
                ks, ds, ss, ns = keys[i], dst_offsets[i], src_offsets[i], sizes[i]
            except (IndexError, TypeError):
                out.append([[INVALID_PARAMS]])
                continue
            for j, key in enumerate(ks):
                try:
                    d, s, n = list(ds[j]), list(ss[j]), list(ns[j])
                except (IndexError, TypeError):
                    row.append([INVALID_PARAMS])
                    continue
                if not (len(d) == len(s) == len(n)) or not d:
                    row.append([INVALID_PARAMS] if (d or s or n) else [])
                    continue
                m = len(d)
                k = key.encode() if isinstance(key, str) else bytes(key)
                dsts = (ctypes.c_void_p * m)(*[int(bptr) + int(x) for x in d])
                offs = (ctypes.c_int64 * m)(*[int(x) for x in s])
                lens = (ctypes.c_int64 * m)(*[int(x) for x in n])
                codes = (ctypes.c_int64 * m)()
                r = self._call(self._lib().xfer_mcs_get_ranges, k, len(k), dsts, offs, lens, m, codes)
                row.append([r] * m if r < 0 else [int(c) for c in codes])
            out.append(row)
        return out

    def get_size(self, key):
        """key's value's size, or a negative code."""
        k = key.encode() if isinstance(key, str) else bytes(key)
        return self._call(self._lib().xfer_mcs_size, k, len(k))

    # -- existence and removal --------------------------------------------

    def is_exist(self, key):
        """1 when key holds a value, 0 when not, a negative code on failure."""
        r = self.batch_is_exist([key])
        return r[0]

    def batch_is_exist(self, keys):
        n = len(keys)
        if n == 0:
            return []
        kb, kl = _keys(keys)
        codes = (ctypes.c_int64 * n)()
        r = self._call(self._lib().xfer_mcs_exist, kb, kl, n, codes)
        if r < 0:
            return [r] * n
        return [int(c) for c in codes]

    def remove(self, key, force=False):
        """Removes key: 0, or a negative code (OBJECT_HAS_LEASE while a
        read lease holds it, unless force)."""
        return self.batch_remove([key], force)[0]

    def batch_remove(self, keys, force=False):
        n = len(keys)
        if n == 0:
            return []
        kb, kl = _keys(keys)
        codes = (ctypes.c_int64 * n)()
        r = self._call(self._lib().xfer_mcs_remove, kb, kl, n, 1 if force else 0, codes)
        if r < 0:
            return [r] * n
        return [int(c) for c in codes]

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the keys matching an RE2 regular expression: their count,
        or a negative code."""
        p = regex_pattern.encode()
        return self._call(self._lib().xfer_mcs_remove_matching, p, len(p), 0, 1 if force else 0)

    def remove_all(self, force=False):
        """Removes every key: their count, or a negative code."""
        return self._call(self._lib().xfer_mcs_remove_matching, b"", 0, 1, 1 if force else 0)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
