"""ManagedBuffer: memory of a connector's registered pool holding one
value, with tensor, NumPy and memoryview views of it."""

import ctypes
import math
import weakref

from . import _lib, dtypes, errors

KIND_BYTES, KIND_TENSOR, KIND_OBJECT, KIND_PICKLE = 1, 2, 3, 4
KIND_NAMES = {KIND_BYTES: "bytes", KIND_TENSOR: "tensor", KIND_OBJECT: "object"}


def _release(handle):
    """Hands a buffer back to its pool (a finalizer: never raises)."""
    try:
        lib = _lib.lib()
        _lib.Call().check(lib.xfer_buffer_release(handle, None, 0))
    except errors.XferError:
        pass  # forked child, or the connector is gone: nothing to hand back


class ManagedBuffer:
    """A value in the pool: what get_buffer received, or what alloc_buffer
    and alloc_tensor handed out to fill in place.

    Views (``tensor``, ``numpy()``, ``memoryview()``) share the pool's
    memory, with no copy. The memory goes back to the pool at release()
    (or leaving a ``with`` block), or, without one, once the buffer and
    every view of it are garbage. After release() -- and after the
    connector's close(), which unmaps the pool -- views must not be used:
    copy what you keep (``tensor.clone()``, ``bytes(...)``).
    """

    def __init__(self, conn, handle, meta):
        self._conn = conn
        self._handle = handle
        self.meta = meta
        self.size = int(meta.get("size", 0))
        self.kind = int(meta.get("kind", KIND_BYTES))
        self.dtype = meta.get("dtype") or None
        self.shape = tuple(meta.get("shape") or ()) if self.kind == KIND_TENSOR else (self.size,)
        self._arr = None
        self.address = 0
        # None: the pool is host memory; else the GPU ("cuda:N") it is on,
        # whose memory the CPU must not touch.
        self.device = getattr(conn, "device", None)
        if self.size > 0:
            # The address, and the view counted, in one step against a
            # close in another thread (Connector._view_of).
            addr = conn._view_of(handle, self.size)
            if not addr:
                # The connector closed while the buffer was handed out.
                _release(handle)
                raise errors.ClosedError("xfer: the connector closed while it handed out a buffer")
            self.address = addr
            # A ctypes array at the pool's address: the views' buffer. The
            # buffer goes back to the pool when this array is garbage (every
            # view holds it) or at release().
            self._arr = (ctypes.c_char * self.size).from_address(addr)
            self._fin = weakref.finalize(self._arr, _release, handle)
            # The array (and so every view) keeps the connector, and its
            # pool mapped, alive: a connector closed while views live
            # unmaps the pool only once the last of them is gone.
            self._arr._conn = conn
            weakref.finalize(self._arr, conn._unview).atexit = False
        else:
            self._fin = weakref.finalize(self, _release, handle)
        self._fin.atexit = False

    @property
    def handle(self):
        return self._handle

    @property
    def released(self):
        return not self._fin.alive

    def _live(self):
        if not self._fin.alive:
            raise errors.ReleasedError(f"xfer: buffer of {self.meta.get('key', 'an alloc')!r}: released")

    @property
    def tensor(self):
        """The value as a torch tensor on the pool's memory (no copy)."""
        self._live()
        torch = dtypes.torch
        if torch is None:
            raise ImportError("xfer: torch is not installed (apt-get install python3-torch)")
        if self.kind == KIND_TENSOR:
            dt, shape = dtypes.torch_dtype(self.dtype), self.shape
        else:
            dt, shape = torch.uint8, (self.size,)
        if self._arr is None:
            return torch.empty(shape, dtype=dt, device=self.device or "cpu")
        if self.device is not None:
            # The pool's GPU memory, shared with torch through the CUDA
            # array interface: torch keeps the holder (and so the buffer)
            # alive as long as the tensor and its views.
            raw = torch.as_tensor(_CudaBytes(self._arr, self.address, self.size), device=self.device)
            return raw.view(dt).reshape(shape)
        return torch.frombuffer(self._arr, dtype=dt).reshape(shape)

    def numpy(self):
        """The value as a NumPy array on the pool's memory (no copy), or,
        for a pool on a GPU, a copy in host memory."""
        self._live()
        if self.device is not None:
            return self.tensor.cpu().numpy()
        np = dtypes.np
        if np is None:
            raise ImportError("xfer: numpy is not installed (apt-get install python3-numpy)")
        if self.kind == KIND_TENSOR:
            dt, shape = dtypes.numpy_dtype(self.dtype), self.shape
        else:
            dt, shape = np.dtype(np.uint8), (self.size,)
        if self._arr is None:
            return np.empty(shape, dtype=dt)
        return np.frombuffer(self._arr, dtype=dt).reshape(shape)

    def memoryview(self):
        """The value's bytes as a writable memoryview (no copy; a copy of
        GPU memory, not writable through to it)."""
        self._live()
        if self.device is not None:
            return memoryview(self.tobytes())
        if self._arr is None:
            return memoryview(b"")
        return memoryview(self._arr).cast("B")

    def tobytes(self):
        """A copy of the value's bytes."""
        self._live()
        if self._arr is None:
            return b""
        if self.device is not None:
            return self._gpu_bytes().numpy().tobytes()
        return ctypes.string_at(self.address, self.size)

    def _gpu_bytes(self):
        """The value's bytes copied from the GPU into a CPU uint8 tensor."""
        torch = dtypes.torch
        if torch is None:
            raise ImportError("xfer: torch is needed to read a GPU pool's memory")
        return torch.as_tensor(_CudaBytes(self._arr, self.address, self.size), device=self.device).cpu()

    def release(self):
        """Hands the memory back to the pool. Idempotent."""
        self._fin()

    def _disown(self):
        """The handle was published (put_buffer took it): no release."""
        self._fin.detach()

    def close(self):
        self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __len__(self):
        return self.size

    def __repr__(self):
        state = "released" if self.released else f"at {self.address:#x}"
        what = f"{self.dtype} {list(self.shape)}" if self.kind == KIND_TENSOR else KIND_NAMES.get(self.kind, "?")
        return f"<xfer.ManagedBuffer {what}, {self.size} bytes, {state}>"


class _CudaBytes:
    """size bytes of GPU memory at address, as the CUDA array interface
    describes them to torch; it holds owner (the buffer's ctypes array,
    whose finalizer hands the memory back to the pool)."""

    def __init__(self, owner, address, size):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}


def nbytes_of(dtype_name, shape):
    size = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
            "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}[dtype_name]
    return size * math.prod(shape)
