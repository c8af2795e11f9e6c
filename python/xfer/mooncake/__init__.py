"""xfer.mooncake: vLLM-Omni's Mooncake transfer engine connector, over xfer.

Code written for vLLM-Omni's ``mooncake_transfer_engine_connector`` module
imports this module in its place and changes nothing else::

    from xfer.mooncake import (BufferAllocator, ManagedBuffer,
                               MooncakeTransferEngineConnector, TransferEngine)

The classes have that module's constructors, methods, return values,
exceptions, metadata keys, configuration keys and defaults, and the
attributes its tests read. Underneath, one ``xfer.Connector`` moves the
values: its pool is the pool the allocator hands out, and its transports
(rdma, shm, tcp) carry them. docs/PYTHON.md says what is the same and what
differs.

``xfer.mooncake.engine`` is Mooncake's ``mooncake.engine.TransferEngine``
itself over xfer (the class frameworks such as vLLM and SGLang call), and
``install_as_mooncake()`` makes ``import mooncake.engine`` find it.
(``TransferEngine`` here is the connector's own: the part of Mooncake's
class the connector uses.)
"""

import bisect
import ctypes
import json
import logging
import os
import threading
import time
import uuid
import weakref

from .. import dtypes, errors
from ..buffer import KIND_BYTES, KIND_TENSOR, _CudaBytes
from ..buffer import ManagedBuffer as _XferBuffer
from ..connector import DEFAULTS as _XFER_DEFAULTS
from ..connector import Connector as _Connector
from ..connector import _Closing
from ..connector import _join, local_address

log = logging.getLogger("xfer.mooncake")

# How long a value no consumer took stays stored (xfer's TTL does the
# reclaiming).
_BUFFER_TTL_SECONDS = 300

# The replies of Mooncake's control protocol. xfer speaks its own protocol
# on the wire; the names are here for code that imports them.
TRANS_DONE = b"trans_done"
TRANS_ERROR = b"trans_error"
QUERY_INFO = b"query_info"
INFO_NOT_FOUND = b"info_not_found"

GiB = 1 << 30

# The configuration keys of Mooncake's connector, with its defaults.
DEFAULTS = {
    "host": "auto",                 # this side's address: "auto" (or "", "*", "0.0.0.0", "::") is this host's
    "zmq_port": 50051,              # the port consumers reach this producer on (xfer: data and control)
    "protocol": "rdma",             # rdma, tcp, shm or auto ($XFER_TRANSPORT overrides it)
    "device_name": "",              # the RDMA device (default: $RDMA_DEVICE_NAME)
    "memory_pool_size": GiB,        # the registered pool, in bytes
    "memory_pool_device": "cpu",    # "cpu", "cuda" or "cuda:N"
    "sender_host": None,            # the producer a get without metadata asks
    "sender_zmq_port": None,
    "role": "sender",               # sender, receiver or dual
    "stage_id": -1,                 # the pipeline stage (vLLM-Omni injects it)
}

# xfer.Connector's own keys, passed through (not warned about).
_PASSED = set(_XFER_DEFAULTS) - set(DEFAULTS)

_AUTO_HOSTS = ("auto", "", "*", "0.0.0.0", "::")


def _metric_interval():
    """Mooncake's MC_TE_METRIC: when on ("1", "true", "yes", "on"), the
    seconds between two reports (MC_TE_METRIC_INTERVAL_SECONDS, 5 by
    default); None when off."""
    if os.environ.get("MC_TE_METRIC", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    try:
        return max(0.1, float(os.environ.get("MC_TE_METRIC_INTERVAL_SECONDS", "5")))
    except ValueError:
        return 5.0


def _report_metrics(conn, stop, interval, name):
    """Logs the connector's throughput and pool use every interval seconds
    until stop is set, as Mooncake's engine does under MC_TE_METRIC. It
    holds the xfer connector, not the Mooncake one, so that the Mooncake
    connector can still be garbage (whose close sets stop)."""
    last = None
    while not stop.wait(interval):
        try:
            h = conn._health()
        except errors.XferError:
            return
        moved = h.get("bytes_put", 0) + h.get("bytes_got", 0)
        rate = 0.0 if last is None else (moved - last) / interval / 1e6
        last = moved
        log.info("%s metrics: %.1f MB/s over the last %.1f s; puts %d, gets %d, served %d, errors %d, "
                 "pool %d of %d bytes in use, peers lost %d, status %s", name, rate, interval, h.get("puts", 0),
                 h.get("gets", 0), h.get("served", 0), h.get("errors", 0), h.get("pool_used_bytes", 0),
                 h.get("pool_bytes", 0), h.get("peers_lost", 0), h.get("status", "?"))


class TransferEngine:
    """Mooncake's ``mooncake.engine.TransferEngine`` as far as code around
    the connector uses it: initialize, get_rpc_port, register_memory,
    unregister_memory and get_local_topology. The connector's own engine
    is an ``xfer.Connector``; this class is what ``TransferEngine is None``
    checks and device probes find."""

    def __init__(self):
        self._conn = None
        self.hostname = self.protocol = self.device_name = None

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Records the engine's address, protocol and device; 0 (success),
        or -1 for a protocol xfer does not have."""
        del metadata_server  # xfer's peers handshake directly (Mooncake's P2PHANDSHAKE)
        if str(protocol).lower() not in ("rdma", "tcp", "shm", "auto"):
            return -1
        self.hostname, self.protocol, self.device_name = local_hostname, protocol, device_name
        return 0

    def get_rpc_port(self):
        """The port peers reach this engine on (0 before it listens)."""
        if self._conn is None or self._conn.closed:
            return 0
        addr = self._conn.address
        return int(addr.rsplit(":", 1)[1]) if addr else 0

    def register_memory(self, addr, size):
        """xfer registers the connector's pool itself: 0."""
        del addr, size
        return 0

    def unregister_memory(self, addr):
        del addr
        return 0

    def get_local_topology(self):
        """The RDMA devices of this host, as JSON: {name: {"name": ...}}."""
        root = "/sys/class/infiniband"
        names = sorted(os.listdir(root)) if os.path.isdir(root) else []
        return json.dumps({n: {"name": n} for n in names})


class BufferAllocator:
    """A first-fit allocator of offsets in a pool of total_size bytes, in
    multiples of alignment. alloc raises MemoryError when no free block is
    large enough; free of a block already free logs a warning and does
    nothing, and free of a block that partly overlaps a free one raises
    RuntimeError (the caller's bookkeeping is wrong). Thread-safe."""

    def __init__(self, total_size, alignment=4096):
        self.total_size = int(total_size)
        self.alignment = int(alignment)
        self.lock = threading.Lock()
        # Free blocks as (start, length), sorted by start, never adjacent.
        self.free_blocks = [(0, self.total_size)] if self.total_size > 0 else []

    def _round(self, size):
        a = self.alignment
        return -(-int(size) // a) * a

    def alloc(self, size):
        """The offset of a new block of size bytes."""
        need = self._round(size)
        with self.lock:
            for i, (start, length) in enumerate(self.free_blocks):
                if length < need:
                    continue
                if length == need:
                    del self.free_blocks[i]
                else:
                    self.free_blocks[i] = (start + need, length - need)
                return start
        raise MemoryError(f"Out of memory in buffer pool: no free block of {need} bytes ({size} asked)")

    def free(self, offset, size):
        """Hands the block at offset back."""
        n = self._round(size)
        end = offset + n
        with self.lock:
            blocks = self.free_blocks
            i = bisect.bisect_right(blocks, (offset, float("inf")))
            # The free blocks that might meet [offset, end): the one before
            # and those starting inside it.
            for start, length in blocks[max(0, i - 1):]:
                if start >= end:
                    break
                if start + length <= offset:
                    continue
                if start <= offset and end <= start + length:
                    log.warning("BufferAllocator: double free of [%d, %d): already free; ignored", offset, end)
                    return
                raise RuntimeError(f"BufferAllocator: memory corruption: freeing [{offset}, {end}) partly overlaps "
                                   f"the free block [{start}, {start + length})")
            blocks.insert(i, (offset, n))
            # Merge with the neighbours it touches.
            if i + 1 < len(blocks) and offset + n == blocks[i + 1][0]:
                blocks[i] = (offset, n + blocks[i + 1][1])
                del blocks[i + 1]
            if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == offset:
                blocks[i - 1] = (blocks[i - 1][0], blocks[i - 1][1] + blocks[i][1])
                del blocks[i]


class ManagedBuffer:
    """size bytes at offset in pool_tensor (a torch tensor, or a NumPy array
    where torch is missing), allocated from allocator: a view to use, then
    release (or leave a ``with`` block). release() calls release_callback
    first: if it returns true, it kept the allocation; otherwise the
    allocation (allocation_size bytes, size by default) goes back to the
    allocator. The buffer is released when it is garbage too."""

    def __init__(self, allocator, offset, size, pool_tensor, release_callback=None, allocation_size=None):
        self.allocator = allocator
        self.offset = int(offset)
        self.size = int(size)
        self.allocation_size = self.size if allocation_size is None else int(allocation_size)
        self.pool_tensor = pool_tensor
        self._release_callback = release_callback
        self._released = False

    def release(self):
        """Hands the memory back. Idempotent."""
        if self._released:
            return
        cb = self._release_callback
        if cb is not None and cb(self):
            self._released = True
            return
        self.allocator.free(self.offset, self.allocation_size)
        self._released = True

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 (a finalizer: interpreter shutdown, a closed connector)
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    @property
    def tensor(self):
        """The bytes as a flat uint8 view of the pool (no copy)."""
        return self.pool_tensor[self.offset:self.offset + self.size]

    def as_tensor(self, dtype, shape):
        """The bytes as a view of dtype and shape (no copy). ValueError when
        they do not make size bytes, RuntimeError when offset is not a
        multiple of dtype's size."""
        item = _itemsize(dtype)
        want = item
        for d in shape:
            if d < 0:
                raise ValueError("as_tensor: a dynamic dimension (-1) is not supported")
            want *= d
        if want != self.size:
            raise ValueError(f"as_tensor: shape {tuple(shape)} of {dtype} is {want} bytes; the buffer holds {self.size}")
        if self.offset % item:
            raise RuntimeError(f"as_tensor: offset {self.offset} is not aligned for {dtype} ({item} bytes)")
        t = self.tensor
        return t.view(_dtype_for(t, dtype)).reshape(tuple(shape))

    def to_bytes(self):
        """A copy of the bytes (from the GPU, for a pool on one)."""
        t = self.tensor
        torch = dtypes.torch
        if torch is not None and isinstance(t, torch.Tensor):
            if t.device.type != "cpu":
                t = t.cpu()
            return t.numpy().tobytes()
        return bytes(t)


def _dtype_for(t, dtype):
    """dtype as t's library names it: a NumPy dtype for a torch tensor is
    torch's, and the other way round."""
    torch = dtypes.torch
    is_torch = torch is not None and isinstance(t, torch.Tensor)
    if is_torch != (torch is not None and isinstance(dtype, torch.dtype)):
        name = dtypes.name_of(dtype)
        return dtypes.torch_dtype(name) if is_torch else dtypes.numpy_dtype(name)
    return dtype


def _itemsize(dtype):
    torch = dtypes.torch
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    return dtypes.np.dtype(dtype).itemsize


class _PoolAllocator(BufferAllocator):
    """A connector's allocator: its blocks are xfer buffers of the
    connector's pool, at their offsets from the pool's start. A block put
    with no copy belongs to xfer from then on (its memory goes back once
    the consumer took it), and freeing it is a no-op."""

    def __init__(self, conn, base, total_size, alignment=4096):
        super().__init__(0, alignment)
        self.total_size = total_size
        self._conn = conn
        self._base = base
        self._blocks = {}  # offset -> xfer ManagedBuffer

    @property
    def free_blocks(self):
        return []

    @free_blocks.setter
    def free_blocks(self, v):
        pass

    def alloc(self, size):
        try:
            b = self._conn.alloc_buffer(max(1, int(size)))
        except (errors.PoolExhaustedError, errors.TooLargeError) as e:
            raise MemoryError(f"Out of memory in buffer pool: {e}") from None
        return self._adopt(b)

    def _adopt(self, b):
        """Takes the xfer buffer b in as a block; its offset."""
        off = b.address - self._base
        with self.lock:
            self._blocks[off] = b
        return off

    def _take(self, offset):
        """The block at offset, no longer this allocator's (put with no
        copy); None if there is none."""
        with self.lock:
            return self._blocks.pop(offset, None)

    def _get(self, offset):
        with self.lock:
            return self._blocks.get(offset)

    def free(self, offset, size):
        del size
        with self.lock:
            b = self._blocks.pop(offset, None)
        if b is not None:
            b.release()

    def _clear(self):
        with self.lock:
            blocks, self._blocks = list(self._blocks.values()), {}
        for b in blocks:
            b.release()


class _PinnedPool:
    """The class of a connector's pool tensor (made on first use): a torch
    tensor whose is_pinned() says True. The pool is the transport's
    registered memory, which is what Mooncake pins for its NICs; its
    slices are plain tensors."""

    cls = None

    @classmethod
    def of(cls, t):
        if cls.cls is None:
            torch = dtypes.torch

            class PinnedPool(torch.Tensor):
                __torch_function__ = torch._C._disabled_torch_function_impl

                def is_pinned(self, device=None):  # noqa: ARG002
                    return True

            cls.cls = PinnedPool
        return t.as_subclass(cls.cls)


class _LocalBuffers(dict):
    """The values this producer stores, by Mooncake key: (src_addrs,
    lengths, holder, should_release, is_fast_path, created_at), as
    Mooncake's connector keeps them. A value its consumer took leaves the
    table at the next look (``in``, len, iteration) or reap_consumed."""

    def __init__(self, owner):
        super().__init__()
        self._owner = weakref.ref(owner)

    def _reap(self):
        o = self._owner()
        if o is not None:
            o.reap_consumed()

    def __contains__(self, key):
        self._reap()
        return super().__contains__(key)

    def __len__(self):
        self._reap()
        return super().__len__()

    def __iter__(self):
        self._reap()
        return iter(list(super().keys()))


class MooncakeTransferEngineConnector(_Closing):
    """vLLM-Omni's MooncakeTransferEngineConnector over an xfer.Connector.

    A sender (the default role) or dual connector listens on host:zmq_port
    and stores values for consumers; every role gets. put returns (ok,
    size, metadata) with Mooncake's metadata (source_host, source_port,
    data_size, is_fast_path); get returns (ManagedBuffer, size) for tensors
    and bytes (release the buffer when done), (object, size) for other
    values, and None when there is no value or the transfer failed.
    """

    supports_raw_data = True

    def __init__(self, config):
        self._closed = True  # until the engine is open: close() then has nothing to do
        self._stop_event = threading.Event()
        self._local_buffers = _LocalBuffers(self)
        self._local_buffers_lock = threading.Lock()
        self._sender_endpoints = {}
        self._metrics = {"puts": 0, "gets": 0, "bytes_transferred": 0, "errors": 0, "timeouts": 0}
        self._conn = None
        self.pool = None
        self.config = config
        config = dict(config or {})
        unknown = sorted(k for k in config if k not in DEFAULTS and k not in _PASSED)
        if unknown:
            log.warning("MooncakeTransferEngineConnector: config keys %s are not used (ignored)", unknown)
        c = dict(DEFAULTS)
        c.update({k: v for k, v in config.items() if k in DEFAULTS and v is not None})
        self.stage_id = c["stage_id"]
        host = str(c["host"])
        self.host = local_address() if host.lower() in _AUTO_HOSTS else host
        self.zmq_port = int(c["zmq_port"])
        # $XFER_TRANSPORT overrides the configured protocol, as for the xfer command.
        self.protocol = os.environ.get("XFER_TRANSPORT") or c["protocol"]
        self.device_name = c["device_name"] or os.environ.get("RDMA_DEVICE_NAME", "")
        self.pool_size = int(c["memory_pool_size"])
        self.pool_device = c["memory_pool_device"]
        self.sender_host = c["sender_host"]
        self.sender_zmq_port = c["sender_zmq_port"]
        role = str(c["role"]).lower()
        if role not in ("sender", "receiver", "dual"):
            raise ValueError(f"Invalid role={role!r} for MooncakeTransferEngineConnector. "
                             "Expected 'sender', 'receiver', or 'dual'.")
        self.role = role
        self.can_put = role in ("sender", "dual")
        self.engine_id = str(uuid.uuid4())

        # A sender gets too (Mooncake's every role pulls): xfer's "dual".
        # A receiver listens nowhere.
        xcfg = {k: v for k, v in config.items() if k in _PASSED}
        xcfg.update({
            "role": "dual" if self.can_put else "receiver",
            "protocol": self.protocol,
            "memory_pool_size": self.pool_size,
            "memory_pool_device": self.pool_device,
        })
        if self.can_put:
            xcfg.update(host=self.host, zmq_port=self.zmq_port)
        if self.device_name:
            xcfg["device_name"] = self.device_name
        self.engine = TransferEngine()
        if self.engine.initialize(self.host, "P2PHANDSHAKE", self.protocol, self.device_name) != 0:
            raise RuntimeError(f"Mooncake Engine initialization failed: protocol {self.protocol!r}")
        try:
            self._conn = _Connector(xcfg)
        except errors.InvalidError:
            raise
        except errors.XferError as e:
            raise RuntimeError(f"MooncakeTransferEngineConnector failed to start on {self.host}:{self.zmq_port}: {e}") from e
        self.engine._conn = self._conn
        self._closed = False
        self.rpc_port = self.engine.get_rpc_port()
        if self.can_put:
            self.zmq_port = self.rpc_port
        h = self._conn._health()
        self.base_ptr = int(h["pool_addr"])
        self.pool = self._map_pool(self.base_ptr, int(h["pool_bytes"]))
        self.allocator = _PoolAllocator(self._conn, self.base_ptr, int(h["pool_bytes"]))
        log.info("MooncakeTransferEngineConnector (xfer) at %s:%s, role %s, pool %d bytes on %s",
                 self.host, self.rpc_port, self.role, self.pool_size, self.pool_device)
        interval = _metric_interval()
        if interval is not None:
            threading.Thread(target=_report_metrics, name="xfer-mooncake-metrics", daemon=True,
                             args=(self._conn, self._stop_event, interval,
                                   f"MooncakeTransferEngineConnector {self.host}:{self.rpc_port}")).start()

    def _map_pool(self, base, size):
        """The whole pool as one uint8 tensor (an array without torch). The
        array under it keeps the connector's memory mapped for as long as
        any view of it lives."""
        conn = self._conn
        arr = (ctypes.c_char * size).from_address(base)
        arr._conn = conn
        conn._view()
        weakref.finalize(arr, conn._unview).atexit = False
        torch = dtypes.torch
        if conn.device is not None:
            return torch.as_tensor(_CudaBytes(arr, base, size), device=conn.device)
        if torch is not None:
            return _PinnedPool.of(torch.frombuffer(arr, dtype=torch.uint8))
        return dtypes.np.frombuffer(arr, dtype=dtypes.np.uint8)

    # ---- keys and endpoints

    @staticmethod
    def _make_key(key, from_stage, to_stage, separator="@"):
        """The key a value is stored under: key@from_to."""
        return f"{key}{separator}{from_stage}_{to_stage}"

    def get_connection_info(self):
        """What a producer tells its consumers."""
        return {"host": self.host, "zmq_port": self.zmq_port, "rpc_port": self.rpc_port, "can_put": self.can_put}

    def update_sender_info(self, sender_host, sender_zmq_port, sender_rank=None):
        """Sets the producer a get without metadata asks: the default one,
        or, with sender_rank, the one of that rank."""
        if sender_rank is not None:
            self._sender_endpoints[sender_rank] = (sender_host, sender_zmq_port)
        else:
            self.sender_host, self.sender_zmq_port = sender_host, sender_zmq_port

    def _resolve_sender_endpoint(self, sender_rank=None):
        if sender_rank is not None and sender_rank in self._sender_endpoints:
            return self._sender_endpoints[sender_rank]
        if self.sender_host and self.sender_zmq_port and str(self.sender_host).lower() != "auto":
            return self.sender_host, int(self.sender_zmq_port)
        return None

    # ---- put

    def put(self, from_stage, to_stage, put_key, data):
        """Stores data for a consumer. Returns (True, size, metadata), or
        (False, 0, None) when it cannot (empty data, a full pool, a
        receiver). Raises RuntimeError once closed."""
        if self._closed:
            raise RuntimeError("Cannot put data: MooncakeTransferEngineConnector is closed")
        if not self.can_put:
            log.warning("Rejecting put for %s: connector is in receiver mode", put_key)
            return False, 0, None
        key = self._make_key(put_key, from_stage, to_stage)
        torch, np = dtypes.torch, dtypes.np
        if isinstance(data, (bytes, bytearray, memoryview)) and len(data) == 0:
            log.warning("Rejecting put for %s: empty bytes payload", key)
            return False, 0, None
        if (torch is not None and isinstance(data, torch.Tensor) and data.numel() == 0) or \
                (np is not None and isinstance(data, np.ndarray) and data.nbytes == 0):
            log.warning("Rejecting put for %s: zero-size tensor", key)
            return False, 0, None
        if isinstance(data, ManagedBuffer) and data.size <= 0:
            log.warning("Rejecting put for %s: final payload size is %d", key, data.size)
            return False, 0, None
        fast = True
        addr = 0
        try:
            if isinstance(data, ManagedBuffer):
                value, addr, fast = self._buffer_value(data)
            elif (torch is not None and isinstance(data, torch.Tensor)) or (np is not None and isinstance(data, np.ndarray)) \
                    or isinstance(data, bytes):
                value = data
            else:
                value, fast = data, False
            size = self._put(key, from_stage, to_stage, value)
        except errors.ClosedError:
            raise RuntimeError("Cannot put data: MooncakeTransferEngineConnector is closed") from None
        except (errors.XferError, TypeError, ValueError) as e:
            self._metrics["errors"] += 1
            log.error("Put failed for %s: %s", key, e)
            return False, 0, None
        if size is None:
            return False, 0, None
        with self._local_buffers_lock:
            dict.__setitem__(self._local_buffers, key,
                             ([addr], [size], (from_stage, to_stage, put_key), False, fast, time.monotonic()))
        self._metrics["puts"] += 1
        self._metrics["bytes_transferred"] += size
        return True, size, {"source_host": self.host, "source_port": self.zmq_port, "data_size": size,
                            "is_fast_path": fast}

    def _buffer_value(self, buf):
        """What put stores for a ManagedBuffer: the xfer buffer itself (no
        copy) when it is a whole block of this pool, else a copy of its
        bytes."""
        if buf.pool_tensor is self.pool and isinstance(buf.allocator, _PoolAllocator) and buf.allocator is self.allocator:
            xb = self.allocator._get(buf.offset)
            if xb is not None and xb.size == buf.size:
                self.allocator._take(buf.offset)
                return xb, self.base_ptr + buf.offset, True
        log.warning("ManagedBuffer from a different pool (or part of a block): put copies it")
        t = buf.tensor
        torch = dtypes.torch
        if torch is not None and isinstance(t, torch.Tensor):
            return t.contiguous(), 0, True
        return bytes(t), 0, True

    def _put(self, key, from_stage, to_stage, value):
        """Puts value with xfer; its size, or None when the pool has no
        room (logged)."""
        torch = dtypes.torch
        try:
            ok, size, _ = self._conn.put(from_stage, to_stage, key, value)
        except ValueError:
            # A dtype xfer does not name: its bytes, which as_tensor reads.
            if torch is None or not isinstance(value, torch.Tensor):
                raise
            ok, size, _ = self._conn.put(from_stage, to_stage, key, value.contiguous().view(-1).view(torch.uint8))
        if not ok:
            log.error("Pool exhausted, cannot put %s", key)
            return None
        return size

    # ---- get

    def get(self, from_stage, to_stage, get_key, metadata=None):
        """Gets a value: with the metadata put returned; with metadata that
        names the producer only (source_host, source_port); or with none,
        from the producer update_sender_info set. Returns (ManagedBuffer,
        size) for tensors and bytes -- release the buffer when done --,
        (object, size) for other values, or None when the producer has no
        such value or the transfer failed. Raises RuntimeError once closed,
        and for a get without metadata before any sender is known."""
        pool = self.pool  # the views this get hands out keep it (and the memory) alive
        if self._closed or pool is None:
            raise RuntimeError("Cannot get data: MooncakeTransferEngineConnector is closed")
        key = self._make_key(get_key, from_stage, to_stage)
        if not metadata:
            ep = self._resolve_sender_endpoint()
            if ep is None:
                raise RuntimeError(
                    f"get(metadata=None) requires sender info to be resolved, but sender_host={self.sender_host!r}, "
                    f"sender_zmq_port={self.sender_zmq_port!r}. Call update_sender_info(host, port) before using "
                    "get() without metadata.")
            host, port = ep
        else:
            host, port = metadata.get("source_host"), metadata.get("source_port")
            if not host or not port or str(host).lower() == "auto":
                log.warning("get(%s): metadata names no producer (source_host, source_port): %s", key, metadata)
                return None
            if "data_size" in metadata and not metadata["data_size"]:
                log.warning("Skipping get for %s: data_size is 0 (metadata=%s)", key, metadata)
                return None
        try:
            xb = self._conn.get_buffer(from_stage, to_stage, key, {"producer": _join(host, int(port))}, no_wait=True)
        except errors.ClosedError:
            if self._closed:
                raise RuntimeError("Cannot get data: MooncakeTransferEngineConnector is closed") from None
            self._metrics["errors"] += 1
            return None
        except errors.NotFoundError as e:
            log.debug("get %s: %s", key, e)
            return None
        except errors.XferTimeoutError as e:
            self._metrics["timeouts"] += 1
            log.error("Get %s timed out: %s", key, e)
            return None
        except errors.XferError as e:
            self._metrics["errors"] += 1
            log.error("Get %s failed: %s", key, e)
            return None
        self._metrics["gets"] += 1
        self._metrics["bytes_transferred"] += xb.size
        if xb.kind in (KIND_BYTES, KIND_TENSOR):
            return self._wrap(xb, pool), xb.size
        return self._conn.value_of(xb), xb.size

    def _wrap(self, xb, pool):
        """A ManagedBuffer of pool (this connector's) over the xfer buffer
        xb."""
        if xb.size == 0:
            xb.release()
            return ManagedBuffer(_NoAllocator, 0, 0, pool)
        return ManagedBuffer(self.allocator, self.allocator._adopt(xb), xb.size, pool)

    def get_with_deadline(self, from_stage, to_stage, get_key, metadata=None, *, deadline):
        """get, or None once time.monotonic() has passed deadline."""
        if time.monotonic() >= deadline:
            return None
        return self.get(from_stage, to_stage, get_key, metadata)

    def abandon_get(self, get_key):
        """Nothing to retire: a get asks its producer once and never stays
        behind."""
        del get_key

    def reap_consumed(self):
        """Forgets the values consumers took (or that expired)."""
        conn = self._conn
        if conn is None or self._closed:
            return
        with self._local_buffers_lock:
            items = list(dict.items(self._local_buffers))
        for k, item in items:
            f, t, _ = item[2]
            try:
                gone = not conn.stored(f, t, k)
            except errors.XferError:
                return
            if gone:
                with self._local_buffers_lock:
                    if dict.get(self._local_buffers, k) is item:
                        dict.__delitem__(self._local_buffers, k)

    # ---- cleanup, health, close

    def cleanup(self, request_id, from_stage=None, to_stage=None):
        """Deletes a stored value: by the key given to put with both
        stages, or by its stored key (_make_key's) with neither."""
        if (from_stage is None) != (to_stage is None):
            raise ValueError(f"cleanup() requires both from_stage and to_stage, or neither. "
                             f"Got from_stage={from_stage!r}, to_stage={to_stage!r}")
        if from_stage is not None:
            request_id = self._make_key(request_id, from_stage, to_stage)
        with self._local_buffers_lock:
            item = dict.pop(self._local_buffers, request_id, None)
        if item is None or self._closed:
            return
        f, t, _ = item[2]
        try:
            self._conn.cleanup(request_id, f, t)
        except errors.XferError as e:
            log.warning("cleanup %s: %s", request_id, e)

    def health(self):
        """Mooncake's health keys, with xfer's judgement: "healthy", or
        "unhealthy" with the reasons in "problems"."""
        if self._closed:
            return {"status": "unhealthy", "error": "Connector is closed"}
        try:
            h = self._conn._health()
        except errors.XferError as e:
            return {"status": "unhealthy", "error": str(e)}
        out = {"status": h.get("status", "unhealthy"), "host": self.host, "metadata_server": None, "master": None,
               "protocol": self.protocol, "pool_device": self.pool_device, "pool_size": self.pool_size,
               **self._metrics,
               "pool_used_bytes": h.get("pool_used_bytes", 0), "peers_lost": h.get("peers_lost", 0)}
        for k in ("problems", "last_error"):
            if h.get(k):
                out[k] = h[k]
        return out

    def close(self):
        """Stops the connector: stored values are dropped, and the pool is
        unmapped once no tensor or buffer handed out points into it.
        Idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._stop_event.set()
        with self._local_buffers_lock:
            dict.clear(self._local_buffers)
        self.allocator._clear()
        self._conn.close()
        self.pool = None


class _NoAllocator:
    """The allocator of an empty buffer: nothing to free."""

    @staticmethod
    def free(offset, size):
        del offset, size


__all__ = ["BufferAllocator", "ManagedBuffer", "MooncakeTransferEngineConnector", "TransferEngine", "install_as_mooncake"]


def install_as_mooncake():
    """Makes ``import mooncake`` and ``import mooncake.engine`` (and so
    ``from mooncake.engine import TransferEngine``) resolve to this package
    and to ``xfer.mooncake.engine``, in this process, as PyMySQL's
    install_as_MySQLdb() does for MySQLdb: a framework written for
    Mooncake's engine then runs on xfer's, unchanged. Call it before the
    framework imports mooncake; it replaces a mooncake imported earlier."""
    import sys

    from . import engine, store
    sys.modules["mooncake"] = sys.modules[__name__]
    sys.modules["mooncake.engine"] = engine
    sys.modules["mooncake.store"] = store
