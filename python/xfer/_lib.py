"""Loading libxfer.so, the connector's C ABI, with ctypes.

The library is found at $XFER_LIBRARY, else next to this file (where
``make python`` puts it). Calls through ctypes.CDLL release the GIL for
their duration, so a blocking get does not stop the process's other
threads. A process that forks after the library loaded cannot call it in
the child: the Go runtime's threads do not survive fork(), so the child
would hang. Every call checks for that first and raises ForkError.
"""

import ctypes
import os
import threading

from . import errors

ABI_VERSION = 5
ERR_LEN = 4096
META_CAP = 64 << 10

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_uint64_p = ctypes.POINTER(ctypes.c_uint64)

_lock = threading.Lock()
_lib = None
_pid = None  # the process that loaded the library
_forked = False


def _after_fork_in_child():
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _path():
    env = os.environ.get("XFER_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libxfer.so")


def _declare(lib):
    s = ctypes.c_char_p
    i64, i32, sz, vp = ctypes.c_int64, ctypes.c_int32, ctypes.c_size_t, ctypes.c_void_p
    err = [s, sz]
    sig = {
        "xfer_abi_version": ([], i32),
        "xfer_open": ([s, i64, c_int64_p] + err, i32),
        "xfer_close": ([i64] + err, i32),
        "xfer_stop": ([i64] + err, i32),
        "xfer_put": ([i64, s, i64, s, i64, s, i64, i32, s, i64, c_int64_p, i32, vp, i64, i32, i32, i64, i64,
                      s, sz, c_int64_p] + err, i32),
        "xfer_alloc": ([i64, s, i64, c_int64_p, i32, i64, i64, c_int64_p] + err, i32),
        "xfer_put_buffer": ([i64, i64, s, i64, s, i64, s, i64, i32, i32, i64, i64, s, sz, c_int64_p] + err, i32),
        "xfer_get": ([i64, s, i64, s, i64, s, i64, s, i64, i64, i32, c_int64_p, s, sz, c_int64_p] + err, i32),
        "xfer_buffer_data": ([i64, ctypes.POINTER(vp), c_int64_p] + err, i32),
        "xfer_buffer_object": ([i64, ctypes.POINTER(vp), c_int64_p, c_int32_p] + err, i32),
        "xfer_buffer_release": ([i64] + err, i32),
        "xfer_cleanup": ([i64, s, i64, s, i64, s, i64, c_int32_p] + err, i32),
        "xfer_stored": ([i64, s, i64, s, i64, s, i64, c_int32_p] + err, i32),
        "xfer_health": ([i64, s, sz, c_int64_p] + err, i32),
        "xfer_free": ([vp], None),
        # Mooncake's TransferEngine (xfer.mooncake.engine): Mooncake's codes.
        "xfer_mc_open": ([s, i64, s, i64, s, i64, s, i64, c_int64_p, c_int32_p] + err, i32),
        "xfer_mc_close": ([i64] + err, i32),
        "xfer_mc_register": ([i64, ctypes.POINTER(vp), c_int64_p, i32, i32] + err, i32),
        "xfer_mc_unregister": ([i64, ctypes.POINTER(vp), i32] + err, i32),
        "xfer_mc_alloc": ([i64, i64, c_uint64_p] + err, i32),
        "xfer_mc_free_managed": ([i64, vp] + err, i32),
        "xfer_mc_copy": ([i64, vp, vp, i64, i32] + err, i32),
        "xfer_mc_first_buffer": ([i64, s, i64, c_uint64_p] + err, i32),
        "xfer_mc_submit": ([i64, s, i64, i32, ctypes.POINTER(vp), c_uint64_p, c_int64_p, i32, c_int64_p] + err, i32),
        "xfer_mc_wait": ([i64, i64, c_int32_p, i32] + err, i32),
        "xfer_mc_check": ([i64, i64, c_int32_p] + err, i32),
        "xfer_mc_transfer": ([i64, s, i64, i32, ctypes.POINTER(vp), c_uint64_p, c_int64_p, i32, i32, s, i64, s, i64,
                              c_int32_p] + err, i32),
        "xfer_mc_notifies": ([i64, ctypes.POINTER(vp), c_int64_p, c_int64_p] + err, i32),
        "xfer_mc_probe": ([i64, s, i64] + err, i32),
        # Mooncake's store (xfer.mooncake.store): its codes, or sizes and counts.
        "xfer_mcs_setup": ([s, i64, c_int64_p] + err, i64),
        "xfer_mcs_close": ([i64] + err, i64),
        "xfer_mcs_hostname": ([i64, s, sz] + err, i64),
        "xfer_mcs_register": ([i64, vp, i64] + err, i64),
        "xfer_mcs_unregister": ([i64, vp] + err, i64),
        "xfer_mcs_put": ([i64, s, i64, vp, i64, s, i64, i32, i32] + err, i64),
        "xfer_mcs_put_batch": ([i64, s, c_int64_p, ctypes.POINTER(vp), c_int64_p, i32, s, i64, i32, i32, c_int64_p] + err,
                               i64),
        "xfer_mcs_get": ([i64, s, i64, ctypes.POINTER(vp), c_int64_p, c_int64_p] + err, i64),
        "xfer_mcs_release": ([i64, i64] + err, i64),
        "xfer_mcs_get_into": ([i64, s, i64, vp, i64] + err, i64),
        "xfer_mcs_get_into_batch": ([i64, s, c_int64_p, ctypes.POINTER(vp), c_int64_p, i32, c_int64_p] + err, i64),
        "xfer_mcs_get_ranges": ([i64, s, i64, ctypes.POINTER(vp), c_int64_p, c_int64_p, i32, c_int64_p] + err, i64),
        "xfer_mcs_size": ([i64, s, i64] + err, i64),
        "xfer_mcs_exist": ([i64, s, c_int64_p, i32, c_int64_p] + err, i64),
        "xfer_mcs_remove": ([i64, s, c_int64_p, i32, i32, c_int64_p] + err, i64),
        "xfer_mcs_remove_matching": ([i64, s, i64, i32, i32] + err, i64),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res


def lib():
    """The loaded library (loading it on first use)."""
    global _lib, _pid
    check_fork()
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _path()
            if not os.path.exists(path):
                raise errors.XferError(
                    f"xfer: the library {path} does not exist: build it with `make python` "
                    "(or point $XFER_LIBRARY at a libxfer.so)")
            try:
                l = ctypes.CDLL(path)
            except OSError as e:
                raise errors.XferError(f"xfer: loading {path}: {e}") from e
            l.xfer_abi_version.argtypes, l.xfer_abi_version.restype = [], ctypes.c_int32
            v = l.xfer_abi_version()
            if v != ABI_VERSION:
                raise errors.XferError(
                    f"xfer: {path} speaks ABI version {v}, this package version {ABI_VERSION}: "
                    "rebuild the library and the package together (make python)")
            _declare(l)
            _lib, _pid = l, os.getpid()
    return _lib


def check_fork():
    """Raises ForkError in a child forked after the library loaded."""
    if _forked or (_pid is not None and os.getpid() != _pid):
        raise errors.ForkError(
            "xfer: this process was forked after it loaded libxfer (the Go runtime does not survive fork, "
            "so any call would hang): open connectors in the child only, with the library loaded there "
            "(import xfer after the fork, or use the 'spawn' or 'forkserver' start method of multiprocessing)")


class Call:
    """One ABI call's error buffer; raise_for(code) raises its message."""

    __slots__ = ("err",)

    def __init__(self):
        self.err = ctypes.create_string_buffer(ERR_LEN)

    def check(self, code):
        if code != 0:
            raise errors.from_code(code, self.err.value.decode("utf-8", "replace"))


def enc(s):
    """A str as UTF-8 bytes and their length."""
    if not isinstance(s, str):
        raise TypeError(f"xfer: want a str, got {type(s).__name__}")
    b = s.encode("utf-8")
    return b, len(b)


def enc_stage(s):
    """A stage ID as enc encodes it: a str, or an int (vLLM-Omni numbers its
    stages), which is its decimal text."""
    if isinstance(s, int) and not isinstance(s, bool):
        s = str(s)
    if not isinstance(s, str):
        raise TypeError(f"xfer: a stage ID is a str or an int, not {type(s).__name__}")
    return enc(s)
