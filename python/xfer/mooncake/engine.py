"""xfer.mooncake.engine: Mooncake's ``mooncake.engine.TransferEngine`` over xfer.

Frameworks that move KV caches through Mooncake (vLLM's P/D connector,
SGLang, vLLM-Omni) call one class, ``mooncake.engine.TransferEngine``. This
module is that class over an xfer Engine (libxfer's ``xfer_mc_*`` calls):
the same methods, arguments, return values and error codes, so that after
``xfer.mooncake.install_as_mooncake()`` the framework's own
``from mooncake.engine import TransferEngine`` gets it::

    import xfer.mooncake
    xfer.mooncake.install_as_mooncake()
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    te.initialize("10.0.0.2", "P2PHANDSHAKE", "tcp", "")
    te.register_memory(addr, size)
    te.transfer_sync_write("10.0.0.3:15432", addr, peer_addr, size)

Segments are named "host:rpc_port" under P2PHANDSHAKE; with a metadata
server (Mooncake's HTTP one, http://HOST:PORT/metadata, which `xfer mooncake
metadata-server` serves, or etcd, etcd://HOST:PORT or a bare HOST:PORT) a
segment is named by its engine's local_hostname, whatever it is. Remote
addresses are raw addresses in the target process, which must lie within
memory the target registered. Calls return 0 or a negative code of
Mooncake's error.h (the ERR_* constants below); the message of the last
failure is in ``TransferEngine.last_error``. docs/MOONCAKE.md lists what is
compatible and what differs.
"""

import ctypes
import enum
import json
import logging
import mmap
import os
import threading

from .. import _lib

log = logging.getLogger(__name__)

P2PHANDSHAKE = "P2PHANDSHAKE"

# Mooncake's error codes (its transfer engine's error.h).
ERR_INVALID_ARGUMENT = -1
ERR_TOO_MANY_REQUESTS = -2
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_BATCH_BUSY = -4
ERR_DEVICE_NOT_FOUND = -6
ERR_ADDRESS_OVERLAPPED = -7
ERR_DNS = -101
ERR_SOCKET = -102
ERR_METADATA = -200
ERR_MEMORY = -302
ERR_NOT_IMPLEMENTED = -303



def _load_cuda():
    """The CUDA driver (libcuda.so.1, loaded, not initialized: a process
    that forks later keeps a working driver), or None where there is none."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    cu.cuStreamSynchronize.argtypes, cu.cuStreamSynchronize.restype = [ctypes.c_void_p], ctypes.c_int
    return cu


_cuda = _load_cuda()

# SUPPORT_CUDA: this process can load the CUDA driver, so register_memory
# takes GPU memory (location "cuda:N", or "*" with a device pointer) and the
# *_on_cuda calls work. Without it they return ERR_DEVICE_NOT_FOUND.
SUPPORT_CUDA = _cuda is not None
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False


class TransferOpcode(enum.IntEnum):
    """A transfer's direction, as Mooncake numbers it."""
    Read = 0
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """Mooncake's notification of a transfer: a name (by convention the
    sender's) and a message, both str. Given to transfer_sync or
    batch_transfer_sync, it reaches the target after the transfer's data,
    and the target's get_notifies returns it."""

    def __init__(self, name="", msg=""):
        self.name, self.msg = name, msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def _rw_spans():
    """The readable and writable mappings of this process, sorted, or None
    where /proc is not there."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    spans = []
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1].startswith("rw"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            spans.append((lo, hi))
    return sorted(spans)


def _host_range(spans, addr, n):
    """Whether [addr, addr+n) lies in spans (host memory of this process
    it can read and write: not a GPU's, not unmapped)."""
    if spans is None:
        return True  # no /proc: the engine's own checks stand
    at, end = addr, addr + n
    for lo, hi in spans:
        if lo <= at < hi:
            at = hi
            if at >= end:
                return True
    return at >= end


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            v = int(v)
        except (TypeError, ValueError):
            raise TypeError(f"xfer.mooncake: {what}: want an int, got {type(v).__name__}") from None
    return v


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_host_buffers = {}  # address -> length, of allocate_host_buffer's mappings
_host_mu = threading.Lock()


def allocate_host_buffer(size):
    """Maps size bytes of host memory (page-rounded, zeroed) for a caller to
    register with an engine, as Mooncake's module-level function; their
    address, or 0 for a size of 0 or less, or when the mapping fails."""
    size = _int(size, "size")
    if size <= 0:
        return 0
    n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
    addr = _libc.mmap(None, n, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        log.warning("xfer.mooncake: allocate_host_buffer(%d): mmap: %s", size, os.strerror(ctypes.get_errno()))
        return 0
    with _host_mu:
        _host_buffers[addr] = n
    return addr


def free_host_buffer(addr):
    """Unmaps a buffer of allocate_host_buffer (unregister it first); 0 is
    a no-op. An address allocate_host_buffer did not return raises
    ValueError, and nothing is unmapped."""
    addr = _int(addr, "address")
    if addr == 0:
        return
    with _host_mu:
        n = _host_buffers.pop(addr, None)
    if n is None:
        raise ValueError(f"xfer.mooncake: free_host_buffer({addr:#x}): not an address allocate_host_buffer returned")
    _libc.munmap(addr, n)


class TransferEngine:
    """Mooncake's TransferEngine over an xfer Engine (see the module's doc)."""

    def __init__(self):
        self._h = 0
        self._port = 0
        self._mu = threading.Lock()
        self.last_error = ""

    # -- life ------------------------------------------------------------

    def _fail(self, code, msg):
        self.last_error = msg
        log.warning("%s (code %d)", msg, code)
        return code

    def _call(self, name, *args):
        """Calls xfer_mc_<name>; returns its code, recording a failure."""
        c = _lib.Call()
        code = getattr(_lib.lib(), "xfer_mc_" + name)(*args, c.err, _lib.ERR_LEN)
        if code != 0:
            self._fail(code, c.err.value.decode("utf-8", "replace"))
        return code

    def _ready(self):
        if not self._h:
            self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: the engine is not initialized (call initialize first)")
            return False
        return True

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Opens the engine. With metadata_server "P2PHANDSHAKE" it listens
        on local_hostname ("host", or "host:port") and its segment is
        "host:rpc_port"; with a metadata server (http://HOST:PORT/metadata,
        etcd://HOST:PORT, a bare HOST:PORT for etcd) its segment is
        local_hostname, published there with where it listens
        (MC_TCP_BIND_ADDRESS, or local_hostname's host when it resolves, on
        a free port), and peers' names are resolved there (ERR_METADATA
        when the server cannot be reached, holds the name for another
        engine, or does not know a peer's). protocol "tcp" or "rdma";
        device_name the RDMA device(s), comma-separated. With XFER_SECRET
        or XFER_SECRET_FILE set, peers must share that secret. 0, or a
        negative code."""
        with self._mu:
            if self._h:
                return self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: initialize: the engine is initialized already")
            host, hl = _lib.enc(str(local_hostname or ""))
            meta, ml = _lib.enc(str(metadata_server or ""))
            proto, pl = _lib.enc(str(protocol or ""))
            dev, dl = _lib.enc(str(device_name or ""))
            h, port = ctypes.c_int64(), ctypes.c_int32()
            code = self._call("open", host, hl, meta, ml, proto, pl, dev, dl, ctypes.byref(h), ctypes.byref(port))
            if code != 0:
                return code
            self._h, self._port = h.value, port.value
            return 0

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name, metadata_type):
        """initialize, with the metadata server's type apart ("etcd",
        "http", or "" for P2PHANDSHAKE)."""
        if metadata_server != P2PHANDSHAKE and metadata_type and "://" not in metadata_server:
            metadata_server = f"{metadata_type}://{metadata_server}"
        return self.initialize(local_hostname, metadata_server, protocol, device_name)

    def close(self):
        """Closes the engine: its registrations end, its managed buffers
        are unmapped. Idempotent. (Mooncake's engine closes when it is
        garbage; this one does too.)"""
        with self._mu:
            h, self._h = self._h, 0
        if h:
            c = _lib.Call()
            _lib.lib().xfer_mc_close(h, c.err, _lib.ERR_LEN)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit, or after a fork
            pass

    def get_rpc_port(self):
        """The port peers reach this engine on: its segment is
        "<local_hostname>:<port>"."""
        return self._port

    def get_local_topology(self, device_name=None):
        """The RDMA devices of this host, as JSON: {name: {"name": ...}}."""
        root = "/sys/class/infiniband"
        names = sorted(os.listdir(root)) if os.path.isdir(root) else []
        if device_name:
            want = set(str(device_name).split(","))
            names = [n for n in names if n in want]
        return json.dumps({n: {"name": n} for n in names})

    def get_notifies(self):
        """The notifications received since the last call, oldest first, as
        TransferNotify objects (each returned once); [] when there are none
        or the engine is not initialized."""
        if not self._h:
            return []
        out, n, dropped = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int64()
        if self._call("notifies", self._h, ctypes.byref(out), ctypes.byref(n), ctypes.byref(dropped)) != 0:
            return []
        try:
            items = json.loads(ctypes.string_at(out.value, n.value))
        finally:
            _lib.lib().xfer_free(out)
        if dropped.value:
            log.warning("xfer.mooncake: %d notifications dropped: more than a million waited for get_notifies",
                        dropped.value)
        return [TransferNotify(i["name"], i["msg"]) for i in items]

    def send_probe(self, peer_server_name):
        """Checks that segment peer_server_name answers now: a round trip
        to its engine (dialing it if need be) within MC_TRANSFER_TIMEOUT.
        0, or a negative code (ERR_SOCKET: nothing answers there; ERR_DNS;
        ERR_METADATA: not a Mooncake segment, or a name the metadata server
        does not know; -1: no answer in time)."""
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        seg, sl = _lib.enc(str(peer_server_name))
        return self._call("probe", self._h, seg, sl)

    # -- memory ----------------------------------------------------------

    def _memory_kind(self, addrs, lens, location):
        """Where the ranges are: (0, 0) host memory, (0, 1) GPU memory, or
        (code, None) refused."""
        loc = str(location or "*")
        device = loc.startswith("cuda")
        if loc != "*" and not device and not loc.startswith("cpu"):
            return self._fail(ERR_NOT_IMPLEMENTED, f"xfer.mooncake: register memory at {loc}: host memory "
                              "(location '*' or 'cpu') or CUDA memory ('cuda:N') only"), None
        for a, n in zip(addrs, lens):
            if n <= 0 or a <= 0:
                return self._fail(ERR_INVALID_ARGUMENT,
                                  f"xfer.mooncake: register [{a:#x}, +{n}): want a non-null address and a positive length"), None
        if device:
            if _cuda is None:
                return self._fail(ERR_DEVICE_NOT_FOUND, f"xfer.mooncake: register memory at {loc}: "
                                  "no CUDA driver (libcuda.so.1) in this process"), None
            return 0, 1
        spans = _rw_spans()
        host = all(_host_range(spans, a, n) for a, n in zip(addrs, lens))
        if host:
            return 0, 0
        if loc == "*" and _cuda is not None:
            return 0, 1  # the driver says whether they are GPU memory
        a, n = next((a, n) for a, n in zip(addrs, lens) if not _host_range(spans, a, n))
        why = "" if loc != "*" else " (nor GPU memory: no CUDA driver here)"
        return self._fail(ERR_INVALID_ARGUMENT, f"xfer.mooncake: register [{a:#x}, +{n}): not host memory this "
                          f"process can read and write{why}"), None

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """Registers ranges of this process's memory for peers (all or
        none; no ranges at all is 0, as in Mooncake). 0, or
        ERR_ADDRESS_OVERLAPPED, ERR_INVALID_ARGUMENT, ..."""
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        addrs = [_int(a, "buffer address") for a in buffer_addresses]
        lens = [_int(n, "capacity") for n in capacities]
        if len(addrs) != len(lens):
            return self._fail(ERR_INVALID_ARGUMENT, f"xfer.mooncake: register {len(addrs)} addresses "
                              f"and {len(lens)} capacities: want as many of each")
        if not addrs:
            return 0
        code, device = self._memory_kind(addrs, lens, location)
        if code:
            return code
        k = len(addrs)
        code = self._call("register", self._h, (ctypes.c_void_p * k)(*addrs), (ctypes.c_int64 * k)(*lens), k, device)
        if code in (ERR_INVALID_ARGUMENT, ERR_DEVICE_NOT_FOUND) and device and str(location or "*") == "*":
            # Neither host memory nor, as the driver says, GPU memory.
            return self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: register: not host memory this process can read "
                              f"and write, nor GPU memory ({self.last_error})")
        return code

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers capacity bytes at buffer_addr (memory the caller owns
        and keeps until it unregisters them)."""
        return self.batch_register_memory([buffer_addr], [capacity], location)

    def batch_unregister_memory(self, buffer_addresses):
        """Unregisters ranges by their base addresses (all or none; none
        at all is 0)."""
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        addrs = [_int(a, "buffer address") for a in buffer_addresses]
        if not addrs:
            return 0
        k = len(addrs)
        return self._call("unregister", self._h, (ctypes.c_void_p * k)(*addrs), k)

    def unregister_memory(self, buffer_addr):
        return self.batch_unregister_memory([buffer_addr])

    def allocate_managed_buffer(self, length):
        """Maps and registers length bytes; their address, or 0."""
        if not self._ready():
            return 0
        out = ctypes.c_uint64()
        if self._call("alloc", self._h, _int(length, "length"), ctypes.byref(out)) != 0:
            return 0
        return out.value

    def free_managed_buffer(self, buffer_addr, length):
        """Unregisters and unmaps a managed buffer. 0, or a negative code."""
        del length  # the engine knows each buffer's size
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        return self._call("free_managed", self._h, _int(buffer_addr, "buffer address"))

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        """Copies length bytes of src_ptr (bytes) to dest_address, which
        must lie within registered memory. 0, or a negative code."""
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        data = bytes(src_ptr)
        n = _int(length, "length")
        if n < 0 or n > len(data):
            return self._fail(ERR_INVALID_ARGUMENT, f"xfer.mooncake: write {n} bytes from {len(data)}")
        return self._call("copy", self._h, _int(dest_address, "address"), data, n, 1)

    def read_bytes_from_buffer(self, source_address, length):
        """length bytes at source_address, which must lie within registered
        memory (else ValueError: nothing is read)."""
        n = _int(length, "length")
        if n < 0:
            raise ValueError(f"xfer.mooncake: read {n} bytes")
        if not self._ready():
            raise ValueError(self.last_error)
        out = ctypes.create_string_buffer(max(n, 1))
        if self._call("copy", self._h, _int(source_address, "address"), out, n, 0) != 0:
            raise ValueError(self.last_error)
        return out.raw[:n]

    def get_first_buffer_address(self, segment_name):
        """The address of the first range segment_name registered, or 0."""
        if not self._ready():
            return 0
        seg, sl = _lib.enc(str(segment_name))
        out = ctypes.c_uint64()
        if self._call("first_buffer", self._h, seg, sl, ctypes.byref(out)) != 0:
            return 0
        return out.value

    # -- transfers -------------------------------------------------------

    def _arrays(self, buffers, peer_buffer_addresses, lengths):
        locals_ = [_int(b, "buffer") for b in buffers]
        remotes = [_int(a, "peer buffer address") for a in peer_buffer_addresses]
        lens = [_int(n, "length") for n in lengths]
        if not (len(locals_) == len(remotes) == len(lens)) or not locals_:
            self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: buffers, peer_buffer_addresses and lengths have different "
                       f"sizes ({len(locals_)}, {len(remotes)}, {len(lens)}) or are empty")
            return None
        if any(a < 0 or a >= 1 << 64 for a in locals_ + remotes) or any(n <= 0 for n in lens):
            self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: an address out of range or a length not positive")
            return None
        k = len(lens)
        return k, (ctypes.c_void_p * k)(*locals_), (ctypes.c_uint64 * k)(*remotes), (ctypes.c_int64 * k)(*lens)

    def _opcode(self, opcode):
        try:
            return int(TransferOpcode(int(opcode)))
        except (TypeError, ValueError):
            self._fail(ERR_INVALID_ARGUMENT, f"xfer.mooncake: opcode {opcode!r}: want TransferOpcode.Read or Write")
            return None

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify=None,
                            transport_hint=""):
        """Moves a batch to or from segment target_hostname and waits for it
        (MC_TRANSFER_TIMEOUT bounds the wait). With notify (a
        TransferNotify), the target is sent it once the batch is done: its
        get_notifies returns it, after the data is in place. A notify that
        cannot be sent fails the call; name and msg together may hold 64 KiB
        less 8 bytes (more: ERR_INVALID_ARGUMENT, and nothing moves). 0, or
        a negative code."""
        del transport_hint  # xfer's engine moves every batch on its protocol
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        op = self._opcode(opcode)
        arrays = self._arrays(buffers, peer_buffer_addresses, lengths)
        if op is None or arrays is None:
            return ERR_INVALID_ARGUMENT
        k, ls, rs, ns = arrays
        seg, sl = _lib.enc(str(target_hostname))
        if notify is None:
            return self._call("transfer", self._h, seg, sl, op, ls, rs, ns, k, 0, None, 0, None, 0, None)
        name, msg = getattr(notify, "name", None), getattr(notify, "msg", None)
        if not isinstance(name, str) or not isinstance(msg, str):
            return self._fail(ERR_INVALID_ARGUMENT, "xfer.mooncake: notify: want a TransferNotify (name and msg "
                              f"of type str), got {type(notify).__name__}")
        (nb, nl), (mb, ml) = _lib.enc(name), _lib.enc(msg)
        return self._call("transfer", self._h, seg, sl, op, ls, rs, ns, k, 1, nb, nl, mb, ml, None)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify=None,
                      transport_hint=""):
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length], opcode, notify,
                                        transport_hint)

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, Write, None, transport_hint)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, Read, None, transport_hint)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, Write, None,
                                        transport_hint)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, Read, None,
                                        transport_hint)

    def _submit(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode):
        """Posts a batch: its id, or None (nothing posted)."""
        if not self._ready():
            return None
        op = self._opcode(opcode)
        arrays = self._arrays(buffers, peer_buffer_addresses, lengths)
        if op is None or arrays is None:
            return None
        k, ls, rs, ns = arrays
        seg, sl = _lib.enc(str(target_hostname))
        bid = ctypes.c_int64()
        if self._call("submit", self._h, seg, sl, op, ls, rs, ns, k, ctypes.byref(bid)) != 0:
            return None
        return bid.value

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                             transport_hint=""):
        """Posts a batch and returns its id at once (0 when nothing was
        posted): get_batch_transfer_status waits for it."""
        del transport_hint
        return self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode) or 0

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, Write,
                                         transport_hint)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, Read,
                                         transport_hint)

    def get_batch_transfer_status(self, batch_ids):
        """Waits for every batch of batch_ids (each bounded by
        MC_TRANSFER_TIMEOUT) and frees them: 0 when all completed, -1 when
        one failed, timed out or is unknown."""
        if not self._ready():
            return -1
        failed = False
        for bid in batch_ids:
            if self._call("wait", self._h, _int(bid, "batch id"), None, 0) != 0:
                failed = True
        return -1 if failed else 0

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Posts one WRITE: its batch id, or 0 (nothing posted), the
        failure sentinel of Mooncake's async calls."""
        del transport_hint
        return self._submit(target_hostname, [buffer], [peer_buffer_address], [length], Write) or 0

    def transfer_check_status(self, batch_id):
        """1: completed (the batch is freed); 0: in flight; -1: failed (freed)
        or unknown; -2: past its timeout (still held: check again, or
        give up on it)."""
        if not self._ready():
            return -1
        state = ctypes.c_int32(-1)
        self._call("check", self._h, _int(batch_id, "batch id"), ctypes.byref(state))
        return state.value

    # -- transfers ordered on a CUDA stream --------------------------------

    def _on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, stream_ptr):
        """Moves a batch after the work queued on CUDA stream stream_ptr (0:
        the default stream) is done: the stream is synchronized, then the
        batch moved and waited for, so work queued on the stream after this
        call returns also runs after the transfer. 0, or a negative code
        (ERR_DEVICE_NOT_FOUND without a CUDA driver)."""
        if not self._ready():
            return ERR_INVALID_ARGUMENT
        if _cuda is None:
            return self._fail(ERR_DEVICE_NOT_FOUND, "xfer.mooncake: a transfer on a CUDA stream: "
                              "no CUDA driver (libcuda.so.1) in this process")
        stream = _int(stream_ptr, "stream_ptr")
        rc = _cuda.cuStreamSynchronize(stream or None)
        # On the default stream, a driver not initialized in this process
        # (3) or no context current on this thread (201) means no work was
        # queued there to wait for.
        if rc != 0 and not (stream == 0 and rc in (3, 201)):
            return self._fail(ERR_INVALID_ARGUMENT, f"xfer.mooncake: cuStreamSynchronize({stream:#x}): CUresult {rc}")
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, opcode)

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                               transport_hint=""):
        del transport_hint
        return self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], Write, stream_ptr)

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                              transport_hint=""):
        del transport_hint
        return self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], Read, stream_ptr)

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                     transport_hint=""):
        del transport_hint
        return self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, Write, stream_ptr)

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                    transport_hint=""):
        del transport_hint
        return self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, Read, stream_ptr)
