"""xfer: the Python binding of the xfer connector.

``xfer.Connector(config)`` implements vLLM-Omni's OmniConnectorBase method
set (put, get, get_with_deadline, cleanup, health, close, and the context
manager) over xfer's RDMA, shm and tcp transports, through libxfer.so (a C
ABI built from Go, loaded with ctypes). docs/PYTHON.md is the guide.
"""

from ._lib import ABI_VERSION
from .buffer import ManagedBuffer
from .connector import DEFAULTS, Connector
from .errors import (ClosedError, ForkError, InvalidError, NotFoundError, ObjectError, PoolExhaustedError,
                     ProtocolError, ReleasedError, RoleError, TooLargeError, XferError, XferTimeoutError)

__all__ = [
    "ABI_VERSION", "Connector", "DEFAULTS", "ManagedBuffer",
    "XferError", "InvalidError", "NotFoundError", "XferTimeoutError", "ClosedError", "PoolExhaustedError",
    "TooLargeError", "RoleError", "ReleasedError", "ProtocolError", "ObjectError", "ForkError",
]
