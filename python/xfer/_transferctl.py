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


class Refused(Fail):
    """A connection dropped before it finished its handshake; reason is
    one of Go's (transferctl.ServeConfig.Refused): no_proof, bad_proof,
    malformed, timeout, evicted or busy."""

    def __init__(self, msg, reason="no_proof"):
        super().__init__(msg)
        self.reason = reason


class _Closed(Fail):
    """The other side closed the connection."""


class _Timeout(Fail):
    """A message not received in time."""


class _Malformed(Fail):
    """A line that is not a message: too long, not JSON, a bad MAC."""


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
            raise _Timeout(f"control channel: no {want!r} message from the {self.peer} within --timeout {self.timeout}s")
        except (ConnectionResetError, ConnectionAbortedError):
            line = b""
        if not line:
            raise _Closed(f"control channel: the {self.peer} closed the connection (did it exit?)")
        if len(line) > MAX_LINE + (_MAC_LEN if self.rkey is not None else 0):
            raise _Malformed(f"control channel: a message from the {self.peer} longer than {MAX_LINE} bytes")
        if self.rkey is not None:
            body = line[:-1] if line.endswith(b"\n") else line
            # The MAC as its canonical lower-case hex, compared in constant
            # time: another spelling of the same bytes is not the line sent.
            ok = (len(body) >= _MAC_LEN and body[_MAC_LEN - 1:_MAC_LEN] == b" " and
                  hmac.compare_digest(body[:_MAC_LEN - 1],
                                      _line_mac(self.rkey, self.received, body[_MAC_LEN:]).hex().encode()))
            if not ok:
                raise _Malformed(f"control channel: a message from the {self.peer} failed authentication "
                           "(forged, replayed or reordered)")
            self.received += 1
            line = body[_MAC_LEN:]
        try:
            m = Msg.decode(line)
        except ValueError as e:
            raise _Malformed(f"control channel: a malformed message from the {self.peer}: {e}")
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


# The bounds of the producer's gate (Go's internal/admit): the connections
# in their handshake at once, and those of them from one source address.
DEFAULT_MAX_PENDING = 64
DEFAULT_MAX_PENDING_PER_SOURCE = 8
# MAX_GRACE bounds how long serve keeps a pending connection safe from
# eviction.
MAX_GRACE = 0.5

# How long connect waits before it dials again a producer that dropped its
# connection.
REDIAL_PAUSE = 0.1


def dial(host, port, timeout, say, deadline=None):
    """Connects to the producer's control channel at host:port, retrying
    until timeout seconds (or the monotonic deadline): the producer may
    start later."""
    if deadline is None:
        deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            return socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
        except OSError as e:
            if time.monotonic() >= deadline:
                raise Fail(f"control channel: no producer answered on {host}:{port} within --timeout "
                           f"{timeout}s (last: {e})")
            if not said:
                say(f"waiting for the producer on {host}:{port} (up to {timeout}s)")
                said = True
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))


def _derive(secret, label, np_, nc):
    return hmac.new(secret.encode(), label.encode() + np_ + nc, hashlib.sha256).digest()


def _line_mac(key, n, msg):
    return hmac.new(key, n.to_bytes(8, "big") + msg, hashlib.sha256).digest()


def _auth_producer(c, secret, commit=lambda: None):
    """The producer's side of the authentication (doc.go); raises Fail,
    Refused for a connection that proved nothing. commit is called once the
    consumer's proof holds, before the producer's own proof goes out: the
    consumer's handshake ends with it, and commit may still refuse."""
    np_ = os.urandom(32)
    c.send(Msg(type=CHALLENGE, nonce=np_.hex()))
    m = c.recv(AUTH)
    try:
        nc, proof = bytes.fromhex(m.nonce), bytes.fromhex(m.proof)
    except ValueError:
        nc = proof = b""
    if len(nc) != 32 or len(proof) != 32:
        c.fail("authentication: malformed proof")
        raise Refused(f"control channel: a malformed proof from the {c.peer}", "malformed")
    if not hmac.compare_digest(proof, _derive(secret, "xfer-transfer-v1 consumer proof", np_, nc)):
        c.fail("authentication failed: the consumer's secret differs")
        raise Refused(f"control channel: the {c.peer}'s proof is wrong (different secrets)", "bad_proof")
    commit()
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


class _Dropped(Fail):
    """The producer closed the connection before this side's handshake
    ended (with a secret: its authentication; without one: hello)."""


def _handshake(c, secret):
    """The consumer's side of the handshake: the authentication, then the
    producer's hello, which it returns. A close before the authentication
    ended (without a secret: before hello) raises _Dropped."""
    def dropped(e):
        if isinstance(e, _Closed):
            return _Dropped(str(e))
        if isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return _Dropped(f"control channel: the {c.peer} closed the connection ({e})")
        return e
    if secret:
        try:
            _auth_consumer(c, secret)
        except (Fail, OSError) as e:
            raise dropped(e) from None
        return c.recv(HELLO)
    try:
        return c.recv(HELLO)
    except (Fail, OSError) as e:
        raise dropped(e) from None


def connect(host, port, timeout, secret, say):
    """Dials the producer (as dial does), authenticates with secret, when
    there is one, and returns the Conn, whose every later message is
    authenticated, with the producer's hello. A producer that drops the
    connection before this side has authenticated (without a secret: before
    its hello), as one busy with other connections may, is dialed again
    until timeout; a producer that refuses this side (another secret) is
    an error at once."""
    deadline = time.monotonic() + timeout
    redialed = False
    said = [False]

    def say_once(s):
        if not said[0]:
            said[0] = True
            say(s)

    while True:
        sock = dial(host, port, timeout, say_once, deadline)
        c = Conn(sock, max(min(timeout, deadline - time.monotonic()), 0.001), "producer")
        try:
            hello = _handshake(c, secret)
        except _Dropped as e:
            c.close()
            if not redialed:
                say(f"the producer on {host}:{port} dropped the connection before the handshake ended; "
                    f"dialing again (up to --timeout {timeout}s)")
                redialed = True
            time.sleep(REDIAL_PAUSE)
            if time.monotonic() >= deadline:
                raise Fail(f"control channel: the producer on {host}:{port} dropped every connection before the "
                           f"handshake ended, for --timeout {timeout}s (last: {e})") from None
            continue
        except BaseException:
            c.close()
            raise
        c.settimeout(timeout)
        return c, hello


class _Ticket:
    """One pending connection's place in its _Gate."""

    def __init__(self, sock, source, deadline):
        self.sock, self.source, self.deadline = sock, source, deadline
        self.since = time.monotonic()
        self.dropped = None  # why the gate dropped it: "evicted", "timeout" or "over"
        self.left = False


class _Gate:
    """The connections in their handshake (Go's internal/admit, with each
    connection's handshake deadline): at most max at once, and per_source
    from one source address; beyond either, the oldest (of the source) is
    evicted for the new one, unless it is younger than grace seconds: then
    the new one is refused instead (admit returns None), so that a flood
    of strays cannot evict the consumer between hello and ready. Dropping
    a connection shuts its socket down, which ends its owner's blocked
    reads at once; the owner leaves the gate before it closes the socket,
    so the gate never touches a closed one."""

    def __init__(self, max_pending, per_source, grace=0.0):
        self.max = max_pending if max_pending > 0 else DEFAULT_MAX_PENDING
        per_source = per_source if per_source > 0 else DEFAULT_MAX_PENDING_PER_SOURCE
        self.per_source = min(per_source, self.max)
        self.grace = grace
        self.mu = threading.Lock()
        self.pending = []  # oldest first
        self.by_source = {}

    def _drop_locked(self, t, why):
        t.dropped = why
        self._remove_locked(t)
        try:
            t.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _remove_locked(self, t):
        self.pending.remove(t)
        self.by_source[t.source] -= 1
        if self.by_source[t.source] <= 0:
            del self.by_source[t.source]
        t.left = True

    def admit(self, sock, source, deadline):
        t = _Ticket(sock, source, deadline)
        with self.mu:
            victim = None
            if self.by_source.get(source, 0) >= self.per_source:
                victim = next(p for p in self.pending if p.source == source)
            elif len(self.pending) >= self.max:
                victim = self.pending[0]
            if victim is not None and t.since - victim.since < self.grace:
                return None  # busy: every connection it could evict is in its grace
            if victim is not None:
                self._drop_locked(victim, "evicted")
            self.pending.append(t)
            self.by_source[source] = self.by_source.get(source, 0) + 1
        return t

    def expire(self, now):
        """Drops the connections whose handshake deadline has passed."""
        with self.mu:
            for t in [t for t in self.pending if t.deadline <= now]:
                self._drop_locked(t, "timeout")

    def close(self):
        """Drops every connection still pending: the wait is over."""
        with self.mu:
            for t in list(self.pending):
                self._drop_locked(t, "over")

    def leave(self, t):
        """Takes t out of the gate, its handshake over or about to be; returns
        why the gate dropped it (None: it did not). Calling it again answers
        the same."""
        with self.mu:
            if not t.left:
                self._remove_locked(t)
            return t.dropped


def _reason(e):
    """The reason of a refused handshake that failed with e (Go's refusal)."""
    if isinstance(e, Refused):
        return e.reason
    if isinstance(e, _Timeout):
        return "timeout"
    if isinstance(e, _Malformed):
        return "malformed"
    return "no_proof"


def serve(host, port, timeout, secret, say, hello, auth_timeout=DEFAULT_AUTH_TIMEOUT,
          max_pending=DEFAULT_MAX_PENDING, max_pending_per_source=DEFAULT_MAX_PENDING_PER_SOURCE, refused=None):
    """Listens on host:port, the producer's, and waits up to timeout seconds
    for the consumer: the first connection that authenticates with secret
    (without a secret, that answers hello with ready). It sends that
    connection hello and returns its Conn with the consumer's ready.

    Any other connection (idle, trickling, closed early, garbage, another
    secret) is dropped when it fails its handshake or after auth_timeout
    (never more than timeout), told to refused(remote, reason, err) when
    given, and counted; serve waits on. At most max_pending connections are
    in their handshake at once, and max_pending_per_source from one address,
    the oldest giving way to a new one. A consumer that refuses the run
    (it answers hello with error) ends serve with that error, a PeerError."""
    if timeout <= 0:
        raise Fail(f"control channel: timeout {timeout}s: must be positive")
    hs_timeout = min(auth_timeout if auth_timeout > 0 else DEFAULT_AUTH_TIMEOUT, timeout)
    ls = socket.create_server((host, port), reuse_port=False)
    deadline = time.monotonic() + timeout
    # A pending connection's grace: a quarter of the handshake's bound, at
    # most MAX_GRACE (Go's transferctl does the same).
    gate = _Gate(max_pending, max_pending_per_source, min(hs_timeout / 4, MAX_GRACE))
    mu = threading.Lock()
    state = {"last": None, "dropped": 0}
    won = queue.Queue(1)  # (Conn, ready) or the consumer's PeerError
    done = threading.Event()
    say(f"waiting for the consumer on {host}:{port} (up to {timeout}s)")

    def handshake(sock, remote, t):
        c = Conn(sock, hs_timeout, "consumer")

        def commit():
            why = gate.leave(t)
            if why:
                raise Refused("control channel: dropped in its handshake to make room for a newer connection"
                              if why == "evicted" else
                              f"control channel: no handshake from the consumer within {hs_timeout}s", why)

        ready, err = None, None
        try:
            if secret:
                _auth_producer(c, secret, commit)
            else:
                c.send(hello)
                ready = c.recv(READY)
            commit()
        except (Fail, OSError) as e:
            err = e
            why = gate.leave(t)
            if why == "evicted" or (why == "timeout" and not isinstance(e, Refused)):
                err = Refused(f"control channel: dropped in its handshake to make room for a newer connection"
                              if why == "evicted" else
                              f"control channel: no handshake from the consumer within {hs_timeout}s", why)
        with mu:  # serve, once over, sets done under mu and then empties won
            if not done.is_set():
                if err is None or (not secret and isinstance(err, PeerError)):
                    try:
                        won.put_nowait(err or (c, ready))  # a PeerError: the consumer refused the run
                        if err is None:
                            return
                    except queue.Full:
                        pass  # another consumer was first
                    err = None
            else:
                err = None  # serve is over: not a refusal
            if err is not None:
                state["last"] = err
                state["dropped"] += 1
        c.close()
        if err is None:
            return
        if refused is not None:
            refused(remote, _reason(err), err)

    try:
        while True:
            try:
                w = won.get_nowait()
            except queue.Empty:
                w = None
            if w is not None:
                with mu:
                    done.set()
                if isinstance(w, PeerError):
                    raise w
                c, ready = w
                with mu:
                    n = state["dropped"]
                if n:
                    say(f"the consumer is connected; {n} other connections were dropped before they completed "
                        "the handshake")
                c.settimeout(timeout)
                if secret:
                    try:
                        c.send(hello)
                        ready = c.recv(READY)
                    except BaseException:
                        c.close()
                        raise
                return c, ready
            now = time.monotonic()
            gate.expire(now)
            if now >= deadline:
                with mu:
                    last = state["last"]
                if last is not None:
                    raise Fail(f"control channel: no consumer completed its handshake on {host}:{port} within "
                               f"--timeout {timeout}s (last refused: {last})")
                raise Fail(f"control channel: no consumer connected to {host}:{port} within --timeout {timeout}s")
            ls.settimeout(min(deadline - now, 0.05))
            try:
                sock, addr = ls.accept()
            except socket.timeout:
                continue
            t = gate.admit(sock, addr[0], time.monotonic() + hs_timeout)
            if t is None:
                sock.close()
                err = Refused("control channel: every connection in its handshake is in its grace: refused a "
                              "newer one", "busy")
                with mu:
                    state["last"] = err
                    state["dropped"] += 1
                if refused is not None:
                    refused(f"{addr[0]}:{addr[1]}", "busy", err)
                continue
            threading.Thread(target=handshake, args=(sock, f"{addr[0]}:{addr[1]}", t), daemon=True).start()
    finally:
        with mu:
            done.set()
        ls.close()
        gate.close()
        try:
            w = won.get_nowait()
            if isinstance(w, tuple):
                w[0].close()
        except queue.Empty:
            pass
