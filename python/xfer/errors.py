"""The exceptions of the xfer package. Each carries the engine's message."""


class XferError(Exception):
    """An error from the xfer engine or its binding."""

    code = -1


class InvalidError(XferError, ValueError):
    """Bad input: a bad config, key, handle, dtype or shape."""

    code = -2


class NotFoundError(XferError, KeyError):
    """The producer holds no value under the key."""

    code = -3

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)


class XferTimeoutError(XferError, TimeoutError):
    """The call's deadline passed first."""

    code = -4


class ClosedError(XferError):
    """The connector is closed."""

    code = -5


class PoolExhaustedError(XferError, MemoryError):
    """No room in the registered pool now: release buffers, or wait."""

    code = -6


class TooLargeError(XferError, MemoryError):
    """The value does not fit the pool at all: raise memory_pool_size."""

    code = -7


class RoleError(XferError):
    """The operation does not belong to the connector's role."""

    code = -8


class ReleasedError(XferError):
    """The buffer was released or published."""

    code = -9


class ProtocolError(XferError):
    """The other side broke the control protocol."""

    code = -10


class ObjectError(XferError, TypeError):
    """An object that is not plain data (or a pickle not accepted)."""

    code = -11


class ForkError(XferError):
    """This process forked after loading the library; it cannot call it."""

    code = -100


_BY_CODE = {c.code: c for c in (InvalidError, NotFoundError, XferTimeoutError, ClosedError, PoolExhaustedError,
                                TooLargeError, RoleError, ReleasedError, ProtocolError, ObjectError)}


def from_code(code, msg):
    return _BY_CODE.get(code, XferError)(msg)
