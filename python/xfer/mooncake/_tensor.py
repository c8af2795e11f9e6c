"""The tensor calls of xfer.mooncake.store's MooncakeDistributedStore.

A tensor is stored as Mooncake stores it, so that either client reads what
the other wrote: a 304-byte metadata block (Mooncake's TensorMetadata,
little-endian, no padding) and then the tensor's bytes, C-contiguous::

    offset  size  field
         0     4  magic          0x4d4f4f4e
         4     2  version        1
         6     2  header_size    304
         8     4  dtype          a code of DTYPES (float32 = 0 ... float8_e5m2 = 14)
        12     4  ndim           0 to 8
        16     4  layout_kind    0 a whole tensor, 1 a shard of one
        20     4  reserved_flags 0
        24     8  data_offset    304: where the bytes start
        32     8  data_bytes     their count: the element size times the
                                 product of local_shape
        40    64  global_shape   8 int64: the whole tensor's dims, -1 past ndim
       104    64  local_shape    8 int64: this object's dims, -1 past ndim
       168     4  axis_count     0 to 4
       172     4  reserved       0
       176   128  axes           4 of 32 bytes: kind (1 = tensor parallel),
                                 axis_index, shard_rank, shard_count,
                                 split_dim, reserved (int32 each), and the
                                 shard's extent along split_dim (int64)

torch is imported by the calls that need it, never by the package.
"""

import ctypes
import struct

TENSOR_MAGIC = 0x4D4F4F4E
TENSOR_VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
LAYOUT_FULL = 0
LAYOUT_SHARD = 1
AXIS_TP = 1
_AXIS_KINDS = 5  # DP, TP, EP, PP, RESERVED

# Mooncake's TensorDtype: the code is the index.
DTYPES = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_ELEMENT_SIZE = (4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1)

_HEADER = struct.Struct("<IHHiiIIQQ")
_AXIS = struct.Struct("<iiiiiiq")
_METADATA = struct.Struct("<IHHiiIIQQ8q8qII" + "iiiiiiq" * MAX_AXES)
METADATA_SIZE = _METADATA.size
assert METADATA_SIZE == 304

# Mooncake's codes, as in store.py (which imports this module).
_INVALID_PARAMS = -600


class TensorFormatError(ValueError):
    """Bytes that are not a stored tensor."""


def _torch():
    import torch
    return torch


def _dtype_codes(torch):
    """{torch dtype: code} for the dtypes this torch has."""
    codes = getattr(_dtype_codes, "cache", None)
    if codes is None:
        codes = {getattr(torch, n): c for c, n in enumerate(DTYPES) if hasattr(torch, n)}
        _dtype_codes.cache = codes
    return codes


def _dims(shape):
    dims = [int(d) for d in shape]
    return dims + [-1] * (MAX_DIMS - len(dims))


def pack_metadata(dtype, global_shape, local_shape=None, data_bytes=None, layout_kind=LAYOUT_FULL, axes=()):
    """The 304-byte metadata of a tensor of dtype (a code of DTYPES) whose
    object holds local_shape (default: global_shape) of the whole
    global_shape; data_bytes defaults to what local_shape's elements take.
    axes: (kind, axis_index, shard_rank, shard_count, split_dim, reserved0,
    reserved1) tuples."""
    local_shape = global_shape if local_shape is None else local_shape
    if len(global_shape) != len(local_shape) or len(global_shape) > MAX_DIMS:
        raise TensorFormatError(f"mooncake tensor: shape {tuple(global_shape)} / {tuple(local_shape)}: "
                                f"want equal ranks of at most {MAX_DIMS}")
    if len(axes) > MAX_AXES:
        raise TensorFormatError(f"mooncake tensor: {len(axes)} layout axes, at most {MAX_AXES}")
    if data_bytes is None:
        data_bytes = _ELEMENT_SIZE[dtype]
        for d in local_shape:
            data_bytes *= int(d)
    ax = []
    for a in axes:
        ax.extend(a)
    ax.extend([0] * (7 * (MAX_AXES - len(axes))))
    return _METADATA.pack(TENSOR_MAGIC, TENSOR_VERSION, METADATA_SIZE, dtype, len(global_shape), layout_kind, 0,
                          METADATA_SIZE, data_bytes, *_dims(global_shape), *_dims(local_shape), len(axes), 0, *ax)


class Metadata:
    """A parsed metadata block."""

    __slots__ = ("dtype", "shape", "global_shape", "layout_kind", "axes", "data_offset", "data_bytes")

    def __init__(self, dtype, shape, global_shape, layout_kind, axes, data_offset, data_bytes):
        self.dtype, self.shape, self.global_shape = dtype, shape, global_shape
        self.layout_kind, self.axes = layout_kind, axes
        self.data_offset, self.data_bytes = data_offset, data_bytes

    @property
    def dtype_name(self):
        return DTYPES[self.dtype]

    def __repr__(self):
        return (f"Metadata(dtype={self.dtype_name}, shape={self.shape}, global_shape={self.global_shape}, "
                f"layout_kind={self.layout_kind}, axes={self.axes}, data_offset={self.data_offset}, "
                f"data_bytes={self.data_bytes})")


def parse_metadata(head, total_length):
    """The Metadata of a stored tensor of total_length bytes whose first
    bytes are head; TensorFormatError says what is wrong, with the checks
    of Mooncake's ValidateTensorMetadata."""
    if total_length < METADATA_SIZE or len(head) < METADATA_SIZE:
        raise TensorFormatError(f"mooncake tensor: {min(total_length, len(head))} bytes, "
                                f"shorter than the {METADATA_SIZE}-byte metadata")
    f = _METADATA.unpack_from(head, 0)
    magic, version, header_size, dtype, ndim, layout_kind, _flags, data_offset, data_bytes = f[:9]
    gshape, lshape = f[9:17], f[17:25]
    axis_count = f[25]
    if magic != TENSOR_MAGIC:
        raise TensorFormatError(f"mooncake tensor: magic {magic:#x}, want {TENSOR_MAGIC:#x}")
    if version != TENSOR_VERSION or header_size != METADATA_SIZE:
        raise TensorFormatError(f"mooncake tensor: version {version}, header size {header_size}; "
                                f"want {TENSOR_VERSION}, {METADATA_SIZE}")
    if not 0 <= dtype < len(DTYPES):
        raise TensorFormatError(f"mooncake tensor: dtype code {dtype} unknown (0 to {len(DTYPES) - 1})")
    if not 0 <= ndim <= MAX_DIMS:
        raise TensorFormatError(f"mooncake tensor: ndim {ndim} out of range (0 to {MAX_DIMS})")
    if axis_count > MAX_AXES:
        raise TensorFormatError(f"mooncake tensor: {axis_count} layout axes, at most {MAX_AXES}")
    if layout_kind > LAYOUT_SHARD:
        raise TensorFormatError(f"mooncake tensor: layout kind {layout_kind} unknown")
    if not METADATA_SIZE <= data_offset <= total_length:
        raise TensorFormatError(f"mooncake tensor: data offset {data_offset} outside [{METADATA_SIZE}, "
                                f"{total_length}]")
    if data_bytes != total_length - data_offset:
        raise TensorFormatError(f"mooncake tensor: {data_bytes} data bytes in the metadata, "
                                f"{total_length - data_offset} stored")
    if any(d < 0 for d in gshape[:ndim]) or any(d < 0 for d in lshape[:ndim]):
        raise TensorFormatError(f"mooncake tensor: negative dim in {lshape[:ndim]} / {gshape[:ndim]}")
    if any(d != -1 for d in gshape[ndim:]) or any(d != -1 for d in lshape[ndim:]):
        raise TensorFormatError(f"mooncake tensor: dims past ndim {ndim} are not -1")
    want = _ELEMENT_SIZE[dtype]
    for d in lshape[:ndim]:
        want *= d
    if data_bytes != want:
        raise TensorFormatError(f"mooncake tensor: {data_bytes} data bytes for {DTYPES[dtype]}"
                                f"{list(lshape[:ndim])}, which takes {want}")
    axes = []
    for i in range(axis_count):
        a = f[27 + 7 * i:34 + 7 * i]
        kind, _idx, rank, count, split_dim = a[:5]
        if not 0 <= kind < _AXIS_KINDS or count <= 0 or not 0 <= rank < count or not -1 <= split_dim < ndim:
            raise TensorFormatError(f"mooncake tensor: layout axis {i} {a} invalid")
        axes.append(a)
    return Metadata(dtype, tuple(lshape[:ndim]), tuple(gshape[:ndim]), layout_kind, tuple(axes), data_offset,
                    data_bytes)


def _torch_dtype(torch, code):
    t = getattr(torch, DTYPES[code], None)
    if t is None:
        raise TensorFormatError(f"mooncake tensor: dtype {DTYPES[code]} is not in torch {torch.__version__}")
    return t


def tensor_from(ptr, total_length, copy):
    """The tensor stored at [ptr, +total_length): a copy in its own memory,
    or (copy False) a tensor viewing that memory."""
    torch = _torch()
    m = parse_metadata(ctypes.string_at(ptr, METADATA_SIZE) if total_length >= METADATA_SIZE else b"",
                       total_length)
    dtype = _torch_dtype(torch, m.dtype)
    if m.data_bytes == 0:
        return torch.empty(m.shape, dtype=dtype)
    if copy:
        out = torch.empty(m.shape, dtype=dtype)
        ctypes.memmove(out.data_ptr(), ptr + m.data_offset, m.data_bytes)
        return out
    view = (ctypes.c_ubyte * m.data_bytes).from_address(ptr + m.data_offset)
    return torch.frombuffer(view, dtype=dtype).reshape(m.shape)


def _is_tensor(obj):
    # As Mooncake's binding: anything whose class is named ...Tensor...
    return "Tensor" in type(obj).__name__ and hasattr(obj, "dtype") and hasattr(obj, "data_ptr")


def _inspect(tensor):
    """(code, contiguous tensor, nbytes) of a torch tensor, or
    TensorFormatError."""
    if not _is_tensor(tensor):
        raise TensorFormatError(f"mooncake tensor: a {type(tensor).__name__} is not a torch tensor")
    torch = _torch()
    code = _dtype_codes(torch).get(tensor.dtype)
    if code is None:
        raise TensorFormatError(f"mooncake tensor: dtype {tensor.dtype} is not one Mooncake stores")
    if tensor.dim() > MAX_DIMS:
        raise TensorFormatError(f"mooncake tensor: {tensor.dim()} dims, at most {MAX_DIMS}")
    t = tensor.detach().contiguous()
    return code, t, t.numel() * t.element_size()


def _serialize_tensor(tensor):
    """Mooncake's binding's helper: (metadata bytes, data pointer, data
    size, owner) of a torch tensor, where owner (its contiguous form)
    holds the data the pointer points at. ValueError for what Mooncake
    cannot store."""
    code, t, n = _inspect(tensor)
    return pack_metadata(code, tuple(t.shape), data_bytes=n), t.data_ptr(), n, t


def _tensor_metadata_size():
    """The size of the metadata that precedes a stored tensor's bytes."""
    return METADATA_SIZE


def _deserialize_tensor(payload):
    """A tensor (in its own memory) from a stored form (bytes-like:
    metadata and data); ValueError when it is not one."""
    mv = memoryview(payload).cast("B")
    if len(mv) == 0:
        raise TensorFormatError("invalid serialized Mooncake tensor payload: empty")
    buf = bytes(mv) if mv.readonly else mv
    if isinstance(buf, bytes):
        ptr = ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value
    else:
        arr = (ctypes.c_char * len(mv)).from_buffer(mv)
        ptr = ctypes.addressof(arr)
    try:
        return tensor_from(ptr, len(mv), copy=True)
    except TensorFormatError as e:
        raise TensorFormatError(f"invalid serialized Mooncake tensor payload: {e}") from None


def stored_form(tensor, meta=None):
    """A host torch uint8 tensor holding tensor's stored form (metadata,
    then its bytes, copied once: from the device for a CUDA tensor), and
    its size. meta: the metadata to write, else a whole tensor's."""
    code, t, n = _inspect(tensor)
    if meta is None:
        meta = pack_metadata(code, tuple(t.shape), data_bytes=n)
    torch = _torch()
    out = torch.empty(METADATA_SIZE + n, dtype=torch.uint8)
    p = out.data_ptr()
    ctypes.memmove(p, meta, METADATA_SIZE)
    if n:
        if t.device.type == "cpu":
            ctypes.memmove(p + METADATA_SIZE, t.data_ptr(), n)
        else:
            out[METADATA_SIZE:].copy_(t.reshape(-1).view(torch.uint8))
    return out, METADATA_SIZE + n


def tp_key(key, rank):
    """The key of a tensor-parallel shard, as Mooncake names it."""
    return f"{key}_tp_{rank}"


def tp_shards(tensor, tp_size, split_dim):
    """The stored forms of tensor's tp_size shards along split_dim (Mooncake
    shards only evenly), each with its shard metadata."""
    code, t, _ = _inspect(tensor)
    shape = tuple(t.shape)
    if not isinstance(split_dim, int) or not 0 <= split_dim < len(shape):
        raise TensorFormatError(f"mooncake tensor: split_dim {split_dim} out of range for shape {shape}")
    if not isinstance(tp_size, int) or tp_size <= 0 or shape[split_dim] % tp_size:
        raise TensorFormatError(f"mooncake tensor: dim {split_dim} of {shape} does not split evenly into "
                                f"{tp_size} shards")
    out = []
    step = shape[split_dim] // tp_size
    for rank in range(tp_size):
        chunk = t.narrow(split_dim, rank * step, step).contiguous()
        local = tuple(chunk.shape)
        meta = pack_metadata(code, shape, local, layout_kind=LAYOUT_SHARD,
                             axes=[(AXIS_TP, 0, rank, tp_size, split_dim, 0, local[split_dim])])
        out.append(stored_form(chunk, meta))
    return out


class TensorCalls:
    """Mooncake's tensor calls over a store's byte calls (_put, _put_many,
    _buffer, put_from, upsert_from, batch_put_from, batch_upsert_from,
    get_into, batch_get_into). Calls return what Mooncake's
    return: 0 or a negative code, a list of them, a tensor or None; a
    failure's message is in last_error."""

    # -- helpers ----------------------------------------------------------

    def _fail(self, msg, code=_INVALID_PARAMS):
        self.last_error = msg if msg.startswith("mooncake") else f"mooncake store: {msg}"
        return code

    def _write_tensors(self, keys, tensors, config, upsert):
        """Stores each tensor's stored form under its key: a list of codes."""
        n = len(keys)
        codes = [_INVALID_PARAMS] * n
        forms, idx = [], []
        for i, t in enumerate(tensors):
            try:
                forms.append(stored_form(t))
                idx.append(i)
            except TensorFormatError as e:
                self._fail(f"{e} (key {keys[i]!r})")
        if forms:
            got = self._put_many([keys[i] for i in idx], [f[0].data_ptr() for f in forms],
                                 [f[1] for f in forms], config, True, upsert)
            for i, c in zip(idx, got):
                codes[i] = c
        return codes

    def _write_one(self, key, tensor, config, upsert):
        try:
            buf, n = stored_form(tensor)
        except TensorFormatError as e:
            return self._fail(str(e))
        return self._put(key, buf.data_ptr(), n, config, True, upsert)

    def _write_tp(self, keys, tensors, tp_size, split_dim, config, upsert):
        """Shards each tensor into tp_size keys key_tp_<rank>: per key, 0 or
        the first failure."""
        codes = [_INVALID_PARAMS] * len(keys)
        skeys, forms, idx = [], [], []
        for i, (k, t) in enumerate(zip(keys, tensors)):
            try:
                shards = tp_shards(t, tp_size, split_dim)
            except TensorFormatError as e:
                self._fail(f"{e} (key {k!r})")
                continue
            idx.append(i)
            for r, f in enumerate(shards):
                skeys.append(tp_key(k, r))
                forms.append(f)
        if forms:
            got = self._put_many(skeys, [f[0].data_ptr() for f in forms], [f[1] for f in forms], config, True,
                                 upsert)
            for j, i in enumerate(idx):
                row = got[j * tp_size:(j + 1) * tp_size]
                codes[i] = next((c for c in row if c != 0), 0)
        return codes

    def _tensor_of_buffer(self, key, buf):
        if isinstance(buf, int):
            return None
        try:
            n = len(buf)
            return tensor_from(ctypes.addressof(buf) if n else 0, n, copy=True)
        except TensorFormatError as e:
            self._fail(f"{e} (key {key!r})")
            return None

    def _tensor_in(self, key, ptr, got):
        if got < 0:
            return None
        try:
            return tensor_from(int(ptr), got, copy=False)
        except TensorFormatError as e:
            self._fail(f"{e} (key {key!r})")
            return None

    @staticmethod
    def _check_config(config):
        if config is None:
            return None
        segs = list(getattr(config, "preferred_segments", None) or [])
        if segs and len(segs) != config.replica_num:
            return (f"mooncake store: {len(segs)} preferred_segments for replica_num {config.replica_num}: "
                    f"want as many")
        return None

    def _check_stored_form(self, buffer_ptr, size):
        """None when [buffer_ptr, +size) holds a stored tensor, else the
        failure's code."""
        if not buffer_ptr:
            return self._fail("buffer_ptr is null")
        size = int(size)
        if size < METADATA_SIZE:
            return self._fail(f"a buffer of {size} bytes is shorter than a tensor's {METADATA_SIZE}-byte metadata")
        try:
            parse_metadata(ctypes.string_at(int(buffer_ptr), METADATA_SIZE), size)
        except TensorFormatError as e:
            return self._fail(str(e))
        return None

    # -- put --------------------------------------------------------------

    def put_tensor(self, key, tensor):
        """Stores a torch tensor (a CUDA one is copied to host) under key in
        Mooncake's stored form: 0, or a negative code."""
        return self._write_one(key, tensor, None, False)

    def upsert_tensor(self, key, tensor):
        """put_tensor, replacing what key held."""
        return self._write_one(key, tensor, None, True)

    def pub_tensor(self, key, tensor, config=None):
        """put_tensor with a ReplicateConfig."""
        err = self._check_config(config)
        return self._fail(err) if err else self._write_one(key, tensor, config, False)

    def upsert_pub_tensor(self, key, tensor, config=None):
        err = self._check_config(config)
        return self._fail(err) if err else self._write_one(key, tensor, config, True)

    def _batch_write(self, keys, tensors_list, config, upsert):
        keys = list(keys)
        tensors_list = list(tensors_list)
        if len(keys) != len(tensors_list) or not keys:
            if keys:
                self._fail(f"{len(keys)} keys, {len(tensors_list)} tensors")
            return [_INVALID_PARAMS] * len(keys)
        err = self._check_config(config)
        if err:
            self._fail(err)
            return [_INVALID_PARAMS] * len(keys)
        return self._write_tensors(keys, tensors_list, config, upsert)

    def batch_put_tensor(self, keys, tensors_list):
        """put_tensor for each key: a list of codes."""
        return self._batch_write(keys, tensors_list, None, False)

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._batch_write(keys, tensors_list, None, True)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._batch_write(keys, tensors_list, config, False)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._batch_write(keys, tensors_list, config, True)

    def put_tensor_from(self, key, buffer_ptr, size):
        """Stores registered memory that holds a tensor's stored form
        (metadata, then data: what get_tensor_into reads) under key."""
        bad = self._check_stored_form(buffer_ptr, size)
        return bad if bad is not None else self.put_from(key, buffer_ptr, size)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        bad = self._check_stored_form(buffer_ptr, size)
        return bad if bad is not None else self.upsert_from(key, buffer_ptr, size)

    def _batch_from(self, keys, buffer_ptrs, sizes, upsert):
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if not keys:
            return []
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            self._fail(f"{len(keys)} keys, {len(buffer_ptrs)} buffers, {len(sizes)} sizes")
            return [_INVALID_PARAMS] * len(keys)
        for i, (p, s) in enumerate(zip(buffer_ptrs, sizes)):
            bad = self._check_stored_form(p, s)
            if bad is not None:
                self.last_error += f" (buffer {i}, key {keys[i]!r})"
                return [bad] * len(keys)
        return (self.batch_upsert_from if upsert else self.batch_put_from)(keys, buffer_ptrs, sizes)

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """put_tensor_from for each key: a list of codes (all
        INVALID_PARAMS when a buffer is not a stored tensor)."""
        return self._batch_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._batch_from(keys, buffer_ptrs, sizes, True)

    # -- get --------------------------------------------------------------

    def get_tensor(self, key):
        """The CPU tensor stored under key, in its own memory; None when it
        cannot be read or is not a stored tensor (see last_error)."""
        return self._tensor_of_buffer(key, self._buffer(key))

    def batch_get_tensor(self, keys):
        """get_tensor for each key: a list of tensors or None."""
        return [self.get_tensor(k) for k in keys]

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads key's stored form into registered memory at buffer_ptr
        (size bytes) and returns a tensor viewing its data there (valid
        while that memory is); None on failure."""
        if not buffer_ptr:
            self._fail("buffer_ptr is null")
            return None
        return self._tensor_in(key, buffer_ptr, self.get_into(key, buffer_ptr, size))

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """get_tensor_into for each key: a list of tensors or None (a list of
        INVALID_PARAMS when the lists' lengths differ or a pointer is
        null)."""
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            self._fail(f"{len(keys)} keys, {len(buffer_ptrs)} buffers, {len(sizes)} sizes")
            return [_INVALID_PARAMS] * len(keys)
        if not all(buffer_ptrs):
            self._fail("a buffer_ptr is null")
            return [_INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        got = self.batch_get_into(keys, buffer_ptrs, sizes)
        return [self._tensor_in(k, p, g) for k, p, g in zip(keys, buffer_ptrs, got)]

    def get_tensor_into_cuda(self, key, tensor):
        """Reads key's tensor into a contiguous destination tensor (CUDA or
        CPU) of its dtype and shape: its data's size, or a negative code."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        """get_tensor_into_cuda for each key: a list of sizes or codes."""
        keys, tensors_list = list(keys), list(tensors_list)
        if len(keys) != len(tensors_list):
            self._fail(f"{len(keys)} keys, {len(tensors_list)} tensors")
            return [_INVALID_PARAMS] * len(keys)
        out = []
        for k, dst in zip(keys, tensors_list):
            out.append(self._read_into_tensor(k, dst))
        return out

    def _read_into_tensor(self, key, dst):
        try:
            code, _, n = _inspect(dst)
        except TensorFormatError as e:
            return self._fail(f"{e} (key {key!r})")
        if not dst.is_contiguous():
            return self._fail(f"the destination tensor for key {key!r} is not contiguous")
        buf = self._buffer(key)
        if isinstance(buf, int):
            return buf
        try:
            total = len(buf)
            p = ctypes.addressof(buf) if total else 0
            m = parse_metadata(ctypes.string_at(p, METADATA_SIZE) if total >= METADATA_SIZE else b"", total)
        except TensorFormatError as e:
            return self._fail(f"{e} (key {key!r})")
        if m.dtype != code or m.shape != tuple(dst.shape) or m.data_bytes != n:
            return self._fail(f"key {key!r} holds {m.dtype_name}{list(m.shape)}, the destination is "
                              f"{DTYPES[code]}{list(dst.shape)}")
        if n:
            torch = _torch()
            src = (ctypes.c_ubyte * n).from_address(p + m.data_offset)
            dst.view(-1).view(torch.uint8).copy_(torch.frombuffer(src, dtype=torch.uint8))
        del buf
        return n

    # -- tensor parallel --------------------------------------------------

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Splits tensor evenly along split_dim into tp_size shards stored
        under key_tp_<rank> (each with its shard's metadata): 0, or the
        first failure's code. tp_size 1 is put_tensor. tp_rank is unused,
        as in Mooncake: every rank's shard is stored."""
        if tp_size <= 1:
            return self.put_tensor(key, tensor)
        return self._write_tp([key], [tensor], tp_size, split_dim, None, False)[0]

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        err = self._check_config(config)
        if err:
            return self._fail(err)
        if tp_size <= 1:
            return self._write_one(key, tensor, config, False)
        return self._write_tp([key], [tensor], tp_size, split_dim, config, False)[0]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp for each key: a list of codes."""
        return self.batch_pub_tensor_with_tp(base_keys, tensors_list, None, tp_rank, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self._batch_write(base_keys, tensors_list, config, False)
        keys, tensors_list = list(base_keys), list(tensors_list)
        if len(keys) != len(tensors_list) or not keys:
            if keys:
                self._fail(f"{len(keys)} keys, {len(tensors_list)} tensors")
            return [_INVALID_PARAMS] * len(keys)
        err = self._check_config(config)
        if err:
            self._fail(err)
            return [_INVALID_PARAMS] * len(keys)
        return self._write_tp(keys, tensors_list, tp_size, split_dim, config, False)

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """The shard of rank tp_rank (key_tp_<rank>) that put_tensor_with_tp
        stored; tp_size 1 is get_tensor(key)."""
        return self.get_tensor(key if tp_size <= 1 else tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        return self.batch_get_tensor(list(base_keys) if tp_size <= 1 else [tp_key(k, tp_rank) for k in base_keys])

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        return self.get_tensor_into(key if tp_size <= 1 else tp_key(key, tp_rank), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        keys = list(base_keys) if tp_size <= 1 else [tp_key(k, tp_rank) for k in base_keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp of the whole tensor whose stored form is in
        memory at buffer_ptr (size bytes)."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_put_tensor_from(base_keys, buffer_ptrs, sizes)
        keys, buffer_ptrs, sizes = list(base_keys), list(buffer_ptrs), list(sizes)
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys) or not keys:
            if keys:
                self._fail(f"{len(keys)} keys, {len(buffer_ptrs)} buffers, {len(sizes)} sizes")
            return [_INVALID_PARAMS] * len(keys)
        codes = [_INVALID_PARAMS] * len(keys)
        idx, tensors = [], []
        for i, (p, s) in enumerate(zip(buffer_ptrs, sizes)):
            if self._check_stored_form(p, s) is not None:
                self.last_error += f" (buffer {i}, key {keys[i]!r})"
                continue
            try:
                tensors.append(tensor_from(int(p), int(s), copy=False))
            except TensorFormatError as e:
                self._fail(f"{e} (buffer {i}, key {keys[i]!r})")
                continue
            idx.append(i)
        if idx:
            got = self._write_tp([keys[i] for i in idx], tensors, tp_size, split_dim, None, False)
            for i, c in zip(idx, got):
                codes[i] = c
        return codes
