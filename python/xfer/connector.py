"""xfer.Connector: vLLM-Omni's OmniConnectorBase method set over the xfer
connector (the C ABI in libxfer.so)."""

import ctypes
import fcntl
import json
import logging
import math
import os
import pickle
import socket
import struct
import threading
import time

from . import _lib, dtypes, errors
from .buffer import KIND_BYTES, KIND_OBJECT, KIND_PICKLE, KIND_TENSOR, ManagedBuffer, nbytes_of

log = logging.getLogger("xfer")

MiB = 1 << 20

# The configuration keys, with their defaults. The first group are the keys
# of vLLM-Omni's Mooncake connector that apply; the rest are xfer's.
DEFAULTS = {
    "host": "127.0.0.1",          # the address this side's engine listens on (sender, dual)
    "zmq_port": 0,                # its port: data and control share it (0 picks a free one)
    "protocol": "auto",           # rdma, tcp, shm or auto
    "device_name": None,          # the RDMA device (default: $RDMA_DEVICE_NAME)
    "memory_pool_size": 64 * MiB,  # the registered pool, in bytes
    "memory_pool_device": "cpu",  # where the pool lives: "cpu", or a GPU: "cuda" or "cuda:N"
    "role": "dual",               # sender, receiver or dual
    "sender_host": None,          # the producer a get without metadata dials
    "sender_zmq_port": None,      # its port
    "advertise_host": None,       # the address consumers dial, when not host
    "secret": None,               # the data plane's shared secret (default: $XFER_SECRET)
    "pull": "auto",               # how a get moves a value: auto, read or write
    "ttl_seconds": 0,             # how long an untaken value stays (0: 300 s; negative: forever)
    "wait_for_memory": False,     # put and get wait (up to their timeout) for pool memory
    "get_timeout": 30.0,          # seconds a get waits for its value (None: forever)
    "put_timeout": 30.0,          # seconds a put may wait for pool memory
    "pickle_trusted_peers_only": False,  # allow pickle for objects that are not plain data
    "engine": None,               # xfer's own keys, as in its config file: {"conns": 1, "rdma": {"gid_index": 3}}
    "stage_id": None,             # the stage this connector serves (vLLM-Omni injects it; kept, not used)
}

# The library's keys that the keys above set, with the keys that set each:
# an engine mapping may set one of them only where the connector key was
# not given.
_DERIVED = {
    "role": ("role",), "transport": ("protocol",), "memory_mb": ("memory_pool_size",),
    "device": ("device_name",), "secret": ("secret",), "pull": ("pull",),
    "wait_for_memory": ("wait_for_memory",), "ttl_seconds": ("ttl_seconds",), "listen": ("host", "zmq_port"),
    "advertise": ("advertise_host",), "producer": ("sender_host", "sender_zmq_port"),
}

ROLES = {"sender": "producer", "producer": "producer", "receiver": "consumer", "consumer": "consumer",
         "dual": "both", "both": "both"}


def _is_plain(v, depth=0):
    """Plain data: what travels as CBOR safely (dict with str keys, list,
    tuple, str, int, finite float, bool, None)."""
    if depth > 64:
        return False
    if v is None or isinstance(v, (bool, str)):
        return True
    if isinstance(v, int):
        return -(1 << 63) <= v < (1 << 64)
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_is_plain(e, depth + 1) for e in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_plain(e, depth + 1) for k, e in v.items())
    return False


def _translate(config):
    """vLLM-Omni's connector keys to the library's JSON configuration."""
    if not isinstance(config, dict):
        raise TypeError(f"xfer: Connector(config): want a dict, got {type(config).__name__}")
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise errors.InvalidError(f"xfer: config: unknown keys {unknown}: the keys are {sorted(DEFAULTS)}")
    c = dict(DEFAULTS)
    c.update({k: v for k, v in config.items() if v is not None})
    role = str(c["role"]).lower()
    if role not in ROLES:
        raise errors.InvalidError(f"xfer: config: role {c['role']!r}: want sender, receiver or dual")
    device = _pool_device(c["memory_pool_device"])
    try:
        pool = int(c["memory_pool_size"])
        port = int(c["zmq_port"])
    except (TypeError, ValueError) as e:
        raise errors.InvalidError(f"xfer: config: memory_pool_size and zmq_port must be integers: {e}") from None
    if pool <= 0:
        raise errors.InvalidError(f"xfer: config: memory_pool_size {pool}: must be positive (bytes)")
    if not 0 <= port <= 65535:
        raise errors.InvalidError(f"xfer: config: zmq_port {port}: want 0 to 65535")
    transport = os.environ.get("XFER_TRANSPORT") or str(c["protocol"])
    out = {
        "role": ROLES[role],
        "transport": transport.lower(),
        "memory_mb": max(1, -(-pool // MiB)),
        "memory_device": device or "host",
        "pull": str(c["pull"]),
        "wait_for_memory": bool(c["wait_for_memory"]),
    }
    engine = c["engine"] or {}
    if not isinstance(engine, dict):
        raise errors.InvalidError(f"xfer: config: engine: want a dict of xfer's config keys, got {type(engine).__name__}")
    names_device = "rdma_device" in engine or "device" in engine or (
        isinstance(engine.get("rdma"), dict) and "device" in engine["rdma"])
    dev = c["device_name"] or ("" if names_device else os.environ.get("RDMA_DEVICE_NAME", ""))
    if dev:
        out["device"] = dev
        ib = "/sys/class/infiniband"
        if out["transport"] == "auto" and not os.path.exists(os.path.join(ib, dev)):
            have = sorted(os.listdir(ib)) if os.path.isdir(ib) else []
            log.warning("xfer: the RDMA device %r does not exist on this host (its devices: %s): protocol auto "
                        "falls back to another transport", dev, ", ".join(have) or "none")
    secret = c["secret"] or os.environ.get("XFER_SECRET", "")
    if secret:
        out["secret"] = secret
    try:
        out["ttl_seconds"] = float(c["ttl_seconds"])
    except (TypeError, ValueError):
        raise errors.InvalidError(f"xfer: config: ttl_seconds {c['ttl_seconds']!r}: want a number") from None
    if str(c["host"]).strip().lower() in ("auto", ""):
        c["host"] = local_address()
    if out["role"] != "consumer":
        out["listen"] = _join(c["host"], port)
        if c["advertise_host"]:
            out["advertise"] = _join(c["advertise_host"], port)
    if c["sender_host"] or c["sender_zmq_port"]:
        if not (c["sender_host"] and c["sender_zmq_port"]):
            raise errors.InvalidError("xfer: config: sender_host and sender_zmq_port go together")
        out["producer"] = _join(c["sender_host"], int(c["sender_zmq_port"]))
    for k, v in engine.items():
        # The binding hands out the pool's memory as host or CUDA tensors:
        # only memory_pool_device, which it reads too, may move the pool.
        if k == "memory_device" or (k == "memory" and str(v).strip().lower().startswith(("cuda", "gpu"))):
            raise errors.InvalidError(f"xfer: config: engine key {k!r}: set the pool's device with memory_pool_device")
        given = [g for g in _DERIVED.get(k, ()) if config.get(g) is not None]
        if given:
            raise errors.InvalidError(f"xfer: config: engine key {k!r} and the key {given[0]!r} set the same option: use one")
        out[k] = v
    return out, c


def local_address():
    """This host's address, as "auto" means it: the source address of the
    route to the outside (a UDP connect, which sends nothing and asks no
    DNS), else the first IPv4 address of an interface that is up and not
    loopback, else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): routed like any outside address
            addr = s.getsockname()[0]
            if addr and not addr.startswith("0."):
                return addr
    except OSError:
        pass
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                req = struct.pack("256s", name.encode()[:15])
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
        except OSError:
            continue
        if not addr.startswith("127."):
            return addr
    return "127.0.0.1"


def mooncake_meta(metadata):
    """metadata in xfer's form: Mooncake's connector's metadata
    (source_host, source_port: the producer's address; data_size; and
    is_fast_path, which xfer does not need: the producer says what the
    value is) becomes a partial metadata that names the producer; xfer's
    own passes unchanged."""
    if not isinstance(metadata, dict) or "producer" in metadata or "source_host" not in metadata:
        return metadata
    host, port = metadata.get("source_host"), metadata.get("source_port")
    if not host or not port or str(host).lower() == "auto":
        raise errors.InvalidError(
            f"xfer: get: Mooncake metadata {metadata!r}: source_host and source_port must name the producer")
    return {"producer": _join(host, int(port))}


def _pool_device(v):
    """memory_pool_device as the library names it: None for host memory,
    else "cuda:N"."""
    dev = str(v).strip().lower()
    if dev in ("cpu", "host", ""):
        return None
    if dev in ("cuda", "gpu"):
        return "cuda:0"
    for p in ("cuda:", "gpu:"):
        if dev.startswith(p) and dev[len(p):].isdigit():
            return "cuda:" + str(int(dev[len(p):]))
    raise errors.InvalidError(f"xfer: config: memory_pool_device {v!r}: want 'cpu', 'cuda' or 'cuda:N'")


def _join(host, port):
    host = str(host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _ms(seconds):
    """A timeout in milliseconds for the ABI (0: none)."""
    if seconds is None:
        return 0
    return max(1, int(seconds * 1000))


class _Alloc:
    """An alloc_tensor's buffer, until a put publishes it. It holds no
    reference to the memory's views, so that a tensor never put goes back
    to the pool once it is garbage."""

    __slots__ = ("handle", "fin", "address", "dtype", "shape")

    def __init__(self, buf, dtype, shape):
        self.handle, self.fin, self.address = buf.handle, buf._fin, buf.address
        self.dtype, self.shape = dtype, shape

    @property
    def released(self):
        return not self.fin.alive


class _Closing:
    """A context manager that closes on exit, and when it is collected (a
    finalizer: never raises); _finalize is what the finalizer runs."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self._finalize()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def _finalize(self):
        self.close()


class Connector(_Closing):
    """A connector: put values for consumers, get values from producers.

    ``Connector(config)`` takes vLLM-Omni's connector configuration (see
    DEFAULTS and docs/PYTHON.md). Its methods are safe to call from many
    threads; blocking calls release the GIL. close() is idempotent, and the
    connector is a context manager.
    """

    def __init__(self, config=None):
        cfg, self.config = _translate(dict(config or {}))
        # Where the pool's buffers live: None (host memory) or "cuda:N".
        self.device = _pool_device(self.config["memory_pool_device"])
        self._pickle = bool(self.config["pickle_trusted_peers_only"])
        self._get_timeout = self.config["get_timeout"]
        self._put_timeout = self.config["put_timeout"]
        self._lock = threading.Lock()
        self._allocs = {}  # address -> _Alloc
        self._keys = {}  # put_key -> {(from_stage, to_stage)}
        self._handle = 0
        self._live = 0  # views of the pool alive (ManagedBuffer arrays)
        self._deferred = 0  # the handle whose close waits for the last view
        lib = _lib.lib()
        try:
            b = json.dumps(cfg, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise errors.InvalidError(f"xfer: config: engine: {e}") from None
        h = ctypes.c_int64()
        call = _lib.Call()
        call.check(lib.xfer_open(b, len(b), ctypes.byref(h), call.err, _lib.ERR_LEN))
        self._handle = h.value
        self._pid = os.getpid()

    # ---- lifecycle

    def _h(self):
        if not self._handle:
            raise errors.ClosedError("xfer: the connector is closed")
        _lib.check_fork()
        return self._handle

    @property
    def closed(self):
        return not self._handle

    def close(self):
        """Closes the connector: every later call fails with ClosedError,
        and stored values are dropped. The pool is unmapped at once, or,
        while tensors, arrays or buffers handed out still point into it,
        once the last of them is garbage: a view never outlives its
        memory. Idempotent."""
        with self._lock:
            h, self._handle = self._handle, 0
            self._allocs.clear()
            self._keys.clear()
            stop = 0
            if h and self._live > 0:
                self._deferred, h, stop = h, 0, h
        if os.getpid() != self._pid:
            return
        if stop:
            # Views live: stop the connector now (calls in flight fail,
            # stored values go), and unmap its pool when the last is gone.
            lib = _lib.lib()
            call = _lib.Call()
            call.check(lib.xfer_stop(stop, call.err, _lib.ERR_LEN))
        if h:
            self._close_handle(h)

    def _close_handle(self, h):
        lib = _lib.lib()
        call = _lib.Call()
        call.check(lib.xfer_close(h, call.err, _lib.ERR_LEN))

    def _view(self):
        """A view of the pool was made (the Mooncake API's pool array)."""
        with self._lock:
            self._live += 1

    def _view_of(self, handle, size):
        """The address of the memory of buffer handle, counted as a view of
        the pool (see _unview); 0 when the connector is closed or closing,
        or the buffer is not size bytes. Under the lock that close() takes,
        so that a close either comes first (and the buffer is refused) or
        sees the view and leaves the pool mapped until it is gone. Read
        outside the lock, the address could be that of a pool that a close
        in another thread unmaps before the view is counted."""
        lib = _lib.lib()
        ptr, n = ctypes.c_void_p(), ctypes.c_int64()
        call = _lib.Call()
        with self._lock:
            if not self._handle:
                return 0
            call.check(lib.xfer_buffer_data(handle, ctypes.byref(ptr), ctypes.byref(n), call.err, _lib.ERR_LEN))
            if not ptr.value or n.value != size:
                return 0
            self._live += 1
            return ptr.value

    def _unview(self):
        """A view of the pool is gone: the last one completes a deferred
        close (a finalizer: never raises)."""
        with self._lock:
            self._live -= 1
            h = 0
            if self._live == 0 and self._deferred:
                h, self._deferred = self._deferred, 0
        if h and os.getpid() == self._pid:
            try:
                self._close_handle(h)
            except errors.XferError:
                pass

    def _finalize(self):
        # Not in a forked child: the handle is the parent's.
        if self._handle and os.getpid() == self._pid:
            self.close()

    # ---- health

    def health(self):
        """The connector's counters and pool use, with its status:
        "healthy"; "unhealthy", with the reasons in "problems" (the pool is
        full, or the last operation failed: "last_error"); or "closed".
        "peers_lost" counts consumers whose connection failed mid-get."""
        if not self._handle:
            return {"status": "closed", "closed": True, "problems": ["the connector is closed"]}
        return self._health()

    def _health(self):
        lib = _lib.lib()
        out = ctypes.create_string_buffer(64 << 10)
        n = ctypes.c_int64()
        call = _lib.Call()
        call.check(lib.xfer_health(self._h(), out, len(out), ctypes.byref(n), call.err, _lib.ERR_LEN))
        return json.loads(out.value.decode())

    @property
    def address(self):
        """host:port consumers dial to reach this producer ("" for a
        receiver)."""
        return self.health().get("addr", "")

    # ---- put

    def put(self, from_stage, to_stage, put_key, data, *, consumers=0, retain=False, ttl=None):
        """Stores data for consumers under (from_stage, to_stage, put_key).

        data: a torch tensor, on the CPU or a CUDA GPU, or a NumPy array
        (copied into the pool once, with the GPU's copy engines where
        either side is GPU memory, or not at all if it came from
        alloc_tensor), bytes-like, a
        ManagedBuffer from alloc_buffer, or plain data (dict with str keys,
        list, tuple, str, int, float, bool, None; with
        pickle_trusted_peers_only, any picklable object).

        Returns (ok, size, metadata): metadata is a dict to hand to the
        consumer's get. ok is False (with size 0 and metadata None, and a
        warning logged) when the pool has no room for the value; every
        other failure raises an XferError with the engine's message.
        """
        opts = (int(consumers), 1 if retain else 0, 0 if ttl is None else (-1 if ttl < 0 else _ms(ttl)))
        try:
            size, meta = self._put(from_stage, to_stage, put_key, data, opts)
        except errors.TooLargeError as e:
            # The library names its own setting; this connector's is memory_pool_size.
            log.warning("%s", str(e).replace("raise Engine.MemoryMB", "raise memory_pool_size"))
            return False, 0, None
        except errors.PoolExhaustedError as e:
            log.warning("%s", e)
            return False, 0, None
        with self._lock:
            self._keys.setdefault(put_key, set()).add((from_stage, to_stage))
        return True, size, meta

    def _put(self, from_stage, to_stage, put_key, data, opts):
        fb, fl = _lib.enc_stage(from_stage)
        tb, tl = _lib.enc_stage(to_stage)
        kb, kl = _lib.enc(put_key)
        torch, np = dtypes.torch, dtypes.np
        if isinstance(data, ManagedBuffer):
            if data._conn is not self:
                raise errors.InvalidError("xfer: put of a buffer of another connector")
            return self._put_buffer(data, fb, fl, tb, tl, kb, kl, opts)
        keep = None  # what must stay alive during the call
        shape = ()
        dtype = b""
        if torch is not None and isinstance(data, torch.Tensor):
            if data.device.type not in ("cpu", "cuda"):
                raise errors.InvalidError(f"xfer: put of a tensor on {data.device}: xfer moves CPU and CUDA memory: put .cpu()")
            a = self._alloc_of(data.data_ptr(), data.dtype, tuple(data.shape), data.is_contiguous())
            if a is not None:
                return self._put_buffer(a, fb, fl, tb, tl, kb, kl, opts)
            t = data.contiguous()
            kind, keep, shape = KIND_TENSOR, t, tuple(t.shape)
            dtype = dtypes.name_of(t.dtype).encode()
            ptr, size = t.data_ptr(), t.numel() * t.element_size()
        elif np is not None and isinstance(data, np.ndarray):
            a = self._alloc_of(data.ctypes.data, data.dtype, tuple(data.shape), data.flags.c_contiguous)
            if a is not None:
                return self._put_buffer(a, fb, fl, tb, tl, kb, kl, opts)
            arr = np.ascontiguousarray(data)
            kind, keep, shape = KIND_TENSOR, arr, arr.shape
            dtype = dtypes.name_of(arr.dtype).encode()
            ptr, size = arr.ctypes.data, arr.nbytes
        elif isinstance(data, (bytes, bytearray, memoryview)):
            kind = KIND_BYTES
            b = data.tobytes() if isinstance(data, memoryview) else data
            if isinstance(b, bytearray):
                keep = (ctypes.c_char * len(b)).from_buffer(b) if len(b) else None
                ptr = ctypes.addressof(keep) if keep is not None else None
            else:
                keep = b
                ptr = ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if b else None
            size = len(b)
        elif _is_plain(data):
            kind = KIND_OBJECT
            keep = json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
            ptr, size = ctypes.cast(ctypes.c_char_p(keep), ctypes.c_void_p).value, len(keep)
        elif self._pickle:
            kind = KIND_PICKLE
            keep = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
            ptr, size = ctypes.cast(ctypes.c_char_p(keep), ctypes.c_void_p).value, len(keep)
        else:
            raise errors.ObjectError(
                f"xfer: put of a {type(data).__name__}: not plain data (dict with str keys, list, tuple, str, int, "
                "float, bool, None), bytes, a tensor or an array. Objects of other types travel only as pickles, "
                "which run code when loaded: set pickle_trusted_peers_only=True on both sides, for trusted peers only")
        shp = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        meta = ctypes.create_string_buffer(_lib.META_CAP)
        mlen = ctypes.c_int64()
        call = _lib.Call()
        lib = _lib.lib()
        code = lib.xfer_put(self._h(), fb, fl, tb, tl, kb, kl, kind, dtype, len(dtype), shp, len(shape),
                            ptr, size, opts[0], opts[1], opts[2], _ms(self._put_timeout),
                            meta, _lib.META_CAP, ctypes.byref(mlen), call.err, _lib.ERR_LEN)
        del keep
        call.check(code)
        m = json.loads(meta.value.decode())
        return int(m["size"]), m

    def _alloc_of(self, address, dtype, shape, contiguous):
        """The alloc_tensor buffer data is the whole of, if any."""
        with self._lock:
            a = self._allocs.get(address)
        if a is None or not contiguous or a.released:
            return None
        try:
            name = dtypes.name_of(dtype)
        except ValueError:
            return None
        if name != a.dtype or tuple(shape) != a.shape:
            return None
        return a

    def _put_buffer(self, buf, fb, fl, tb, tl, kb, kl, opts):
        """Publishes buf (a ManagedBuffer or an _Alloc) with no copy."""
        if buf.released:
            raise errors.ReleasedError("xfer: put of a buffer already released or published")
        with self._lock:
            self._allocs.pop(buf.address, None)
        meta = ctypes.create_string_buffer(_lib.META_CAP)
        mlen = ctypes.c_int64()
        call = _lib.Call()
        lib = _lib.lib()
        code = lib.xfer_put_buffer(self._h(), buf.handle, fb, fl, tb, tl, kb, kl, opts[0], opts[1], opts[2],
                                   _ms(self._put_timeout), meta, _lib.META_CAP, ctypes.byref(mlen), call.err, _lib.ERR_LEN)
        # The library took the handle over, published or released.
        if isinstance(buf, _Alloc):
            buf.fin.detach()
        else:
            buf._disown()
        call.check(code)
        m = json.loads(meta.value.decode())
        return int(m["size"]), m

    # ---- zero copy

    def alloc_tensor(self, dtype, shape):
        """A torch tensor (or, with dtype a NumPy dtype and no torch, an
        array) on the pool's memory, to fill in place and put with no copy.
        The memory goes back to the pool if it is never put, once the
        tensor is garbage."""
        name = dtypes.name_of(dtype)
        shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        buf = self._alloc(name, shape, nbytes_of(name, shape))
        with self._lock:
            if buf.address:
                self._allocs[buf.address] = _Alloc(buf, name, shape)
        use_numpy = dtypes.torch is None or (dtypes.np is not None and not isinstance(dtype, (str, dtypes.torch.dtype)))
        return buf.numpy() if use_numpy else buf.tensor

    def alloc_buffer(self, nbytes):
        """A ManagedBuffer of nbytes in the pool, to fill in place (its
        memoryview(), tensor or numpy()) and put with no copy, or release."""
        return self._alloc("", (), int(nbytes))

    def _alloc(self, name, shape, nbytes):
        if nbytes < 0:
            raise errors.InvalidError(f"xfer: alloc of {nbytes} bytes")
        db = name.encode()
        shp = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        h = ctypes.c_int64()
        call = _lib.Call()
        lib = _lib.lib()
        call.check(lib.xfer_alloc(self._h(), db, len(db), shp, len(shape), nbytes, _ms(self._put_timeout),
                                  ctypes.byref(h), call.err, _lib.ERR_LEN))
        meta = {"size": nbytes, "kind": KIND_TENSOR if name else KIND_BYTES}
        if name:
            meta.update(dtype=name, shape=list(shape))
        return ManagedBuffer(self, h.value, meta)

    # ---- get

    def get_buffer(self, from_stage, to_stage, get_key, metadata=None, *, timeout=-1, no_wait=False):
        """Gets the value into the pool and returns it as a ManagedBuffer
        (release it when done, or use it in a with block). Raises
        NotFoundError or XferTimeoutError when there is no value in time."""
        fb, fl = _lib.enc_stage(from_stage)
        tb, tl = _lib.enc_stage(to_stage)
        kb, kl = _lib.enc(get_key)
        if timeout == -1:
            timeout = self._get_timeout
        if metadata is None:
            mb = b""
        elif isinstance(metadata, dict):
            mb = json.dumps(mooncake_meta(metadata)).encode()
        else:
            raise TypeError(f"xfer: get: metadata is a dict (what put returned) or None, not {type(metadata).__name__}")
        h = ctypes.c_int64()
        meta = ctypes.create_string_buffer(_lib.META_CAP)
        mlen = ctypes.c_int64()
        call = _lib.Call()
        lib = _lib.lib()
        call.check(lib.xfer_get(self._h(), fb, fl, tb, tl, kb, kl, mb, len(mb), _ms(timeout), 1 if no_wait else 0,
                                ctypes.byref(h), meta, _lib.META_CAP, ctypes.byref(mlen), call.err, _lib.ERR_LEN))
        return ManagedBuffer(self, h.value, json.loads(meta.value.decode()))

    def get(self, from_stage, to_stage, get_key, metadata=None):
        """Gets the value put under (from_stage, to_stage, get_key).

        Returns (obj, size), or None when the producer has no value within
        get_timeout. obj is bytes, the object, or -- for a tensor -- a torch
        tensor on this connector's pool with no copy: its memory goes back
        to the pool once the tensor and its views are garbage (clone() what
        you keep past close()). Other failures raise an XferError.
        """
        return self._get(from_stage, to_stage, get_key, metadata, -1)

    def get_with_deadline(self, from_stage, to_stage, get_key, metadata=None, deadline=None):
        """get, bounded by deadline: an absolute time.monotonic() value
        (None: get_timeout). Returns None once the deadline has passed."""
        if deadline is None:
            return self._get(from_stage, to_stage, get_key, metadata, -1)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        return self._get(from_stage, to_stage, get_key, metadata, left)

    def _get(self, from_stage, to_stage, get_key, metadata, timeout):
        try:
            buf = self.get_buffer(from_stage, to_stage, get_key, metadata, timeout=timeout)
        except (errors.NotFoundError, errors.XferTimeoutError) as e:
            log.debug("%s", e)
            return None
        return self.value_of(buf), buf.size

    def value_of(self, buf):
        """What get returns for a ManagedBuffer: bytes (a copy), the object,
        or the tensor on the buffer's memory. The buffer is released unless
        it holds a tensor (whose view keeps it)."""
        if buf.kind == KIND_TENSOR:
            if dtypes.torch is not None and buf.dtype in dtypes.TORCH_BY_NAME:
                return buf.tensor
            return buf.numpy()
        try:
            if buf.kind == KIND_BYTES:
                return buf.tobytes()
            return self._object(buf)
        finally:
            buf.release()

    def _object(self, buf):
        lib = _lib.lib()
        p, n, pk = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int32()
        call = _lib.Call()
        call.check(lib.xfer_buffer_object(buf.handle, ctypes.byref(p), ctypes.byref(n), ctypes.byref(pk),
                                          call.err, _lib.ERR_LEN))
        try:
            b = ctypes.string_at(p.value, n.value)
        finally:
            lib.xfer_free(p)
        if pk.value:
            if not self._pickle:
                raise errors.ObjectError(
                    f"xfer: the value under {buf.meta.get('key')!r} is a pickle, which runs code when loaded: "
                    "refused. Set pickle_trusted_peers_only=True to accept pickles, from trusted peers only")
            return pickle.loads(b)  # noqa: S301 (opted in: trusted peers only)
        return json.loads(b)

    # ---- cleanup

    def stored(self, from_stage, to_stage, put_key):
        """Whether a value put here under (from_stage, to_stage, put_key) is
        still stored: not yet taken by its consumers, cleaned up or
        expired."""
        fb, fl = _lib.enc_stage(from_stage)
        tb, tl = _lib.enc_stage(to_stage)
        kb, kl = _lib.enc(put_key)
        out = ctypes.c_int32()
        call = _lib.Call()
        call.check(_lib.lib().xfer_stored(self._h(), fb, fl, tb, tl, kb, kl, ctypes.byref(out), call.err, _lib.ERR_LEN))
        return bool(out.value)

    def cleanup(self, put_key, from_stage=None, to_stage=None):
        """Deletes what this connector put under put_key (between the given
        stages, or every pair it used). Returns whether anything was
        there."""
        if (from_stage is None) != (to_stage is None):
            raise errors.InvalidError("xfer: cleanup: give both stages or neither")
        if from_stage is not None:
            pairs = {(from_stage, to_stage)}
        else:
            with self._lock:
                pairs = set(self._keys.get(put_key, ()))
        existed = False
        kb, kl = _lib.enc(put_key)
        lib = _lib.lib()
        for f, t in pairs:
            fb, fl = _lib.enc_stage(f)
            tb, tl = _lib.enc_stage(t)
            e = ctypes.c_int32()
            call = _lib.Call()
            call.check(lib.xfer_cleanup(self._h(), fb, fl, tb, tl, kb, kl, ctypes.byref(e), call.err, _lib.ERR_LEN))
            existed = existed or bool(e.value)
        with self._lock:
            left = self._keys.get(put_key)
            if left is not None:
                left -= pairs
                if not left:
                    del self._keys[put_key]
        return existed
