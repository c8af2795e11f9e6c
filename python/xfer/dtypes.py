"""Element types: the connector's names (safetensors') and torch's and
NumPy's."""

try:
    import torch
except ImportError:  # the package works with NumPy alone
    torch = None
try:
    import numpy as np
except ImportError:
    np = None

NAMES = ("F16", "BF16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL")

TORCH = {}
if torch is not None:
    TORCH = {
        torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
        torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
        torch.uint8: "U8", torch.bool: "BOOL",
    }
TORCH_BY_NAME = {v: k for k, v in TORCH.items()}

NUMPY = {
    "float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8", "int16": "I16", "int32": "I32",
    "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
}
NUMPY_BY_NAME = {v: k for k, v in NUMPY.items()}


def name_of(dtype):
    """The connector's name of a torch dtype, a NumPy dtype or a string."""
    if torch is not None and isinstance(dtype, torch.dtype):
        if dtype not in TORCH:
            raise ValueError(f"xfer: torch dtype {dtype} has no counterpart in the connector (want one of {NAMES})")
        return TORCH[dtype]
    if isinstance(dtype, str):
        u = dtype.strip().upper()
        if u in NAMES:
            return u
        low = dtype.strip().lower()
        if low == "bfloat16":
            return "BF16"
        if low in NUMPY:
            return NUMPY[low]
        raise ValueError(f"xfer: dtype {dtype!r}: want one of {NAMES} or a torch or NumPy dtype")
    if np is not None:
        try:
            d = np.dtype(dtype)
        except TypeError:
            d = None
        if d is not None and d.name in NUMPY:
            if d.byteorder == ">":
                raise ValueError(f"xfer: big-endian dtype {d}: the connector's tensors are little-endian")
            return NUMPY[d.name]
    raise ValueError(f"xfer: dtype {dtype!r}: want one of {NAMES} or a torch or NumPy dtype")


def torch_dtype(name):
    if torch is None:
        raise ImportError("xfer: torch is not installed (apt-get install python3-torch)")
    if name not in TORCH_BY_NAME:
        raise ValueError(f"xfer: dtype {name} has no torch counterpart: use ManagedBuffer.numpy()")
    return TORCH_BY_NAME[name]


def numpy_dtype(name):
    if np is None:
        raise ImportError("xfer: numpy is not installed (apt-get install python3-numpy)")
    if name not in NUMPY_BY_NAME:
        raise ValueError(f"xfer: dtype {name} has no NumPy counterpart: use ManagedBuffer.tensor")
    return np.dtype(NUMPY_BY_NAME[name])
