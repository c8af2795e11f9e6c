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
import hashlib
import hmac
import json
import os
import queue
import socket
import threading
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
CHALLENGE = "challenge"  # producer -> consumer: its nonce (with a secret)
AUTH = "auth"            # consumer -> producer: nonce and proof; producer -> consumer: proof

# How long a connection has to authenticate before the producer closes it.
DEFAULT_AUTH_TIMEOUT = 10.0
_MAC_LEN = 65  # 64 hex digits and a space


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
    # challenge and auth
    nonce: str = ""
    proof: str = ""

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
          "transport": str, "error": str, "nonce": str, "proof": str}

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
        # After authentication every line carries a MAC (doc.go).
        self.skey = self.rkey = None
        self.sent = self.received = 0

    def settimeout(self, timeout):
        self.timeout = timeout
        self.sock.settimeout(timeout)

    def send(self, msg):
        b = msg.encode()
        if self.skey is not None:
            mac = _line_mac(self.skey, self.sent, b[:-1])
            self.sent += 1
            b = mac.hex().encode() + b" " + b
        self.sock.sendall(b)

    def recv(self, want):
        """The next message, which must be of type want; the other side's
        error message raises PeerError."""
        try:
            line = self.f.readline(MAX_LINE + _MAC_LEN + 1)
        except socket.timeout:
            raise Fail(f"control channel: no {want!r} message from the {self.peer} within --timeout {self.timeout}s")
        if not line:
            raise Fail(f"control channel: the {self.peer} closed the connection (did it exit?)")
        if len(line) > MAX_LINE + (_MAC_LEN if self.rkey is not None else 0):
            raise Fail(f"control channel: a message from the {self.peer} longer than {MAX_LINE} bytes")
        if self.rkey is not None:
            body = line[:-1] if line.endswith(b"\n") else line
            # The MAC as its canonical lower-case hex, compared in constant
            # time: another spelling of the same bytes is not the line sent.
            ok = (len(body) >= _MAC_LEN and body[_MAC_LEN - 1:_MAC_LEN] == b" " and
                  hmac.compare_digest(body[:_MAC_LEN - 1],
                                      _line_mac(self.rkey, self.received, body[_MAC_LEN:]).hex().encode()))
            if not ok:
                raise Fail(f"control channel: a message from the {self.peer} failed authentication "
                           "(forged, replayed or reordered)")
            self.received += 1
            line = body[_MAC_LEN:]
        try:
            m = Msg.decode(line)
        except ValueError as e:
            raise Fail(f"control channel: a malformed message from the {self.peer}: {e}")
        if m.type == want:
            return m
        if m.type == ERROR:
            raise PeerError(f"the {self.peer} failed: {m.error}")
        if want == CHALLENGE and m.type == HELLO:
            raise Fail(f"control channel: the {self.peer} has no secret, and this side has one: "
                       "give both the same secret")
        if want == HELLO and m.type == CHALLENGE:
            raise Fail(f"control channel: the {self.peer} requires a shared secret, and this side has none: "
                       "give both the same secret (--secret-file, $XFER_SECRET)")
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


def _derive(secret, label, np_, nc):
    return hmac.new(secret.encode(), label.encode() + np_ + nc, hashlib.sha256).digest()


def _line_mac(key, n, msg):
    return hmac.new(key, n.to_bytes(8, "big") + msg, hashlib.sha256).digest()


def _auth_producer(c, secret):
    """The producer's side of the authentication (doc.go); raises Fail."""
    np_ = os.urandom(32)
    c.send(Msg(type=CHALLENGE, nonce=np_.hex()))
    m = c.recv(AUTH)
    try:
        nc, proof = bytes.fromhex(m.nonce), bytes.fromhex(m.proof)
    except ValueError:
        nc = proof = b""
    if len(nc) != 32:
        raise c.fail("authentication: malformed proof")
    if not hmac.compare_digest(proof, _derive(secret, "xfer-transfer-v1 consumer proof", np_, nc)):
        c.fail("authentication failed: the consumer's secret differs")
        raise Fail(f"control channel: the {c.peer}'s proof is wrong (different secrets)")
    c.send(Msg(type=AUTH, proof=_derive(secret, "xfer-transfer-v1 producer proof", np_, nc).hex()))
    c.skey = _derive(secret, "xfer-transfer-v1 producer key", np_, nc)
    c.rkey = _derive(secret, "xfer-transfer-v1 consumer key", np_, nc)


def _auth_consumer(c, secret):
    """The consumer's side of the authentication (doc.go); raises Fail."""
    m = c.recv(CHALLENGE)
    try:
        np_ = bytes.fromhex(m.nonce)
    except ValueError:
        np_ = b""
    if len(np_) != 32:
        raise Fail(f"control channel: a malformed challenge from the {c.peer}")
    nc = os.urandom(32)
    c.send(Msg(type=AUTH, nonce=nc.hex(), proof=_derive(secret, "xfer-transfer-v1 consumer proof", np_, nc).hex()))
    m = c.recv(AUTH)
    try:
        proof = bytes.fromhex(m.proof)
    except ValueError:
        proof = b""
    if not hmac.compare_digest(proof, _derive(secret, "xfer-transfer-v1 producer proof", np_, nc)):
        raise Fail(f"control channel: the {c.peer} could not prove it knows the secret (different secrets)")
    c.skey = _derive(secret, "xfer-transfer-v1 consumer key", np_, nc)
    c.rkey = _derive(secret, "xfer-transfer-v1 producer key", np_, nc)


def connect(host, port, timeout, secret, say):
    """Dials the producer (as dial does) and authenticates with secret, when
    there is one; returns the Conn."""
    c = Conn(dial(host, port, timeout, say), timeout, "producer")
    if secret:
        try:
            _auth_consumer(c, secret)
        except BaseException:
            c.close()
            raise
    return c


def serve(host, port, timeout, secret, say, auth_timeout=DEFAULT_AUTH_TIMEOUT):
    """Listens on host:port, the producer's, and returns the Conn of the
    first consumer that authenticates with secret, waiting up to timeout
    seconds in all; a connection that has not authenticated within
    auth_timeout is closed. Without a secret, the first connection."""
    if not secret:
        return Conn(accept(host, port, timeout, say), timeout, "consumer")
    ls = socket.create_server((host, port), reuse_port=False)
    deadline = time.monotonic() + timeout
    won = queue.Queue(1)
    last = [None]
    done = threading.Event()
    say(f"waiting for the consumer on {host}:{port} (up to {timeout}s)")

    def try_auth(sock):
        c = Conn(sock, min(auth_timeout, timeout), "consumer")
        try:
            _auth_producer(c, secret)
        except (Fail, OSError) as e:
            last[0] = e
            c.close()
            return
        if done.is_set():
            c.close()
            return
        try:
            won.put_nowait(c)
        except queue.Full:
            c.close()

    try:
        while True:
            left = deadline - time.monotonic()
            try:
                c = won.get_nowait()
                c.settimeout(timeout)
                return c
            except queue.Empty:
                pass
            if left <= 0:
                why = f" (last refused: {last[0]})" if last[0] else ""
                raise Fail(f"control channel: no consumer authenticated on {host}:{port} within --timeout {timeout}s{why}")
            ls.settimeout(min(left, 0.2))
            try:
                sock, _ = ls.accept()
            except socket.timeout:
                continue
            threading.Thread(target=try_auth, args=(sock,), daemon=True).start()
    finally:
        done.set()
        ls.close()
