"""The control channel of ``python -m xfer.cross_node`` and of Go's ``xfer
transfer``: the messages with which a producer and a consumer agree on a run
and hand each other, transfer by transfer, a tensor's metadata and the
verdict on it.

The wire format is defined by the Go package connector/transferctl, in its
doc.go; this module follows it and is the one place on the Python side that
spells it: the message types, the members of each (the fields of ``Msg``),
the line limit and the default port. In short: one TCP connection, the
consumer dialing the producer's --ctrl-port; each message one compact JSON
object and a line feed, at most MAX_LINE bytes; absent members are zero
values, unknown ones are ignored.
"""

import dataclasses
import json
import socket
import time
from typing import Optional

DEFAULT_PORT = 15501
MAX_LINE = 64 << 10

# The message types: a message's "type" member.
HELLO = "hello"  # producer -> consumer: the run
READY = "ready"  # consumer -> producer: the run is agreed
PUT = "put"      # producer -> consumer: a tensor is there
GOT = "got"      # consumer -> producer: the tensor was got
ERROR = "error"  # either side: it gives up, and why


class Fail(Exception):
    """This side gives up: the message says why."""


class PeerError(Fail):
    """The other side gave up and sent an error message."""


@dataclasses.dataclass
class Msg:
    """One control message; the members in use depend on type (doc.go)."""

    type: str = ""
    # hello
    transfers: int = 0
    bytes: int = 0
    dtype: str = ""
    mode: str = ""
    benchmark: bool = False
    # ready
    pull: str = ""
    # put and got
    seq: int = 0
    meta: Optional[dict] = None
    md5: str = ""
    put_seconds: float = 0.0
    md5_ok: Optional[bool] = None
    seconds: float = 0.0
    transport: str = ""
    # error
    error: str = ""

    def encode(self):
        """The message as one line, as Go's encoder writes it: members in
        the order above, zero values left out (md5_ok and meta only when
        None: false and {} are values)."""
        m = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("type", "md5_ok", "meta"):
                keep = f.name == "type" or v is not None
            else:
                keep = v is not None and v is not False and v != 0 and v != ""
            if keep:
                m[f.name] = v
        b = json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace") + b"\n"
        if len(b) > MAX_LINE:
            raise Fail(f"control channel: a {self.type!r} message of {len(b)} bytes, more than {MAX_LINE}")
        return b

    @classmethod
    def decode(cls, line):
        """Parses one line; raises ValueError when it is not a message."""
        m = json.loads(line)
        if not isinstance(m, dict):
            raise ValueError("not an object")
        kw = {}
        for f in dataclasses.fields(cls):
            v = m.get(f.name)
            if v is None:
                continue
            if not _is(v, _TYPES[f.name]):
                raise ValueError(f"{f.name}: {v!r} is not a {_JSON_NAMES[_TYPES[f.name]]}")
            kw[f.name] = v
        return cls(**kw)


_TYPES = {"type": str, "transfers": int, "bytes": int, "dtype": str, "mode": str, "benchmark": bool, "pull": str,
          "seq": int, "meta": dict, "md5": str, "put_seconds": float, "md5_ok": bool, "seconds": float,
          "transport": str, "error": str}

_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def _is(v, t):
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, t)


class Conn:
    """One end of the control channel, to peer ("producer" or "consumer")."""

    def __init__(self, sock, timeout, peer):
        self.sock, self.peer = sock, peer
        sock.settimeout(timeout)
        self.f = sock.makefile("rb")
        self.timeout = timeout

    def send(self, msg):
        self.sock.sendall(msg.encode())

    def recv(self, want):
        """The next message, which must be of type want; the other side's
        error message raises PeerError."""
        try:
            line = self.f.readline(MAX_LINE + 1)
        except socket.timeout:
            raise Fail(f"control channel: no {want!r} message from the {self.peer} within --timeout {self.timeout}s")
        if not line:
            raise Fail(f"control channel: the {self.peer} closed the connection (did it exit?)")
        if len(line) > MAX_LINE:
            raise Fail(f"control channel: a message from the {self.peer} longer than {MAX_LINE} bytes")
        try:
            m = Msg.decode(line)
        except ValueError as e:
            raise Fail(f"control channel: a malformed message from the {self.peer}: {e}")
        if m.type == want:
            return m
        if m.type == ERROR:
            raise PeerError(f"the {self.peer} failed: {m.error}")
        raise Fail(f"control channel: the {self.peer} sent a {m.type!r} message where a {want!r} was due")

    def fail(self, err):
        """Tells the other side about err (best effort), unless err is the
        other side's own, and returns it as a Fail."""
        if isinstance(err, PeerError):
            return err
        try:
            self.send(Msg(type=ERROR, error=str(err)))
        except (OSError, Fail):
            pass
        return Fail(str(err))

    def close(self):
        self.f.close()
        self.sock.close()


def accept(host, port, timeout, say):
    """Listens on host:port, the producer's, and accepts the consumer's
    connection, waiting up to timeout seconds."""
    ls = socket.create_server((host, port), reuse_port=False)
    ls.settimeout(timeout)
    say(f"waiting for the consumer on {host}:{port} (up to {timeout}s)")
    try:
        sock, _ = ls.accept()
    except socket.timeout:
        raise Fail(f"control channel: no consumer connected to {host}:{port} within --timeout {timeout}s")
    finally:
        ls.close()
    return sock


def dial(host, port, timeout, say):
    """Connects to the producer's control channel at host:port, retrying
    until timeout seconds: the producer may start later."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            return socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            if time.monotonic() >= deadline:
                raise Fail(f"control channel: no producer answered on {host}:{port} within --timeout "
                           f"{timeout}s (last: {e})")
            if not said:
                say(f"waiting for the producer on {host}:{port} (up to {timeout}s)")
                said = True
            time.sleep(0.2)
