"""The control channel of python -m xfer.cross_node among stray
connections, as Go's transferctl.Serve: every connection's handshake runs
on its own behind a gate (64 pending, 8 per source address, the oldest
evicted), a connection that does not finish it in time or closes is dropped
and counted, and a consumer dropped before its handshake ended dials again
until its timeout. Real sockets on loopback."""

import socket
import threading
import time

import pytest

from xfer import _transferctl as tc

SECRET = "the-strays-secret-of-this-test"
HELLO = tc.Msg(type=tc.HELLO, transfers=1, bytes=16, dtype="F32", mode="copy")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Producer:
    """tc.serve in a thread: its result, what it said, what it refused."""

    def __init__(self, port, secret, timeout=30, **kw):
        self.said, self.refused = [], []
        self.result = self.error = None
        self.listening = threading.Event()

        def say(s):
            self.said.append(s)
            self.listening.set()

        def run():
            try:
                self.result = tc.serve("127.0.0.1", port, timeout, secret, say, HELLO,
                                       refused=lambda remote, reason, err: self.refused.append((remote, reason)), **kw)
            except BaseException as e:  # noqa: B902 - handed to the test
                self.error = e
            finally:
                self.listening.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.listening.wait(10)

    def join(self, timeout=30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "serve did not return"
        if self.error is not None:
            raise self.error
        return self.result

    def reasons(self):
        return sorted({r for _, r in self.refused})


def stray(port, kind, source="127.0.0.1"):
    """A stray connection of kind: idle (connects, says nothing), trickling
    (a byte at a time, never a line), garbage (a line that is not a
    message, then idle), closed (connects and closes). Returns the socket,
    which the caller closes (None for closed)."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    if kind == "closed":
        s.close()
        return None
    if kind == "garbage":
        s.sendall(b"\x00\xffGET / HTTP/1.0 not json\n")
    if kind == "trickling":
        def trickle():
            try:
                while True:
                    s.sendall(b"{")
                    time.sleep(0.05)
            except OSError:
                pass
        threading.Thread(target=trickle, daemon=True).start()
    return s


def consume(port, secret, timeout=20, said=None):
    """The real consumer: the handshake, ready, then one put and got."""
    c, hello = tc.connect("127.0.0.1", port, timeout, secret, (said.append if said is not None else lambda s: None))
    assert (hello.transfers, hello.bytes, hello.dtype) == (1, 16, "F32")
    c.send(tc.Msg(type=tc.READY, pull="read"))
    m = c.recv(tc.PUT)
    assert m.seq == 1
    c.send(tc.Msg(type=tc.GOT, seq=1, md5_ok=True))
    return c


def produce(p):
    c, ready = p.join()
    assert ready.pull == "read"
    c.send(tc.Msg(type=tc.PUT, seq=1, meta={"key": "a/b/c"}))
    assert c.recv(tc.GOT).md5_ok is True
    return c


def run_pair(port, p, secret, said=None):
    """The consumer in this thread, the producer's side of the run after
    serve returns; both connections closed."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("c", produce(p)), daemon=True)
    t.start()
    cc = consume(port, secret, said=said)
    t.join(30)
    assert "c" in box, f"producer: {p.error}"
    cc.close()
    box["c"].close()


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
@pytest.mark.parametrize("kind", ["idle", "trickling", "garbage", "closed"])
def test_strays_before_the_consumer(kind, secret):
    port = free_port()
    p = Producer(port, secret, auth_timeout=0.5)
    socks = [stray(port, kind) for _ in range(5)]
    if kind in ("idle", "trickling"):
        time.sleep(0.1)  # still in their handshake when the consumer comes
    run_pair(port, p, secret)
    for s in socks:
        if s is not None:
            s.close()
    # Every stray ended before serve returned, or was still pending (idle,
    # trickling: their handshake timeout had not passed): those are not
    # refusals.
    if kind in ("garbage", "closed"):
        deadline = time.monotonic() + 5
        while len(p.refused) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(p.refused) >= 1
        assert set(p.reasons()) <= {"malformed", "no_proof"}
        said = [s for s in p.said if "other connections were dropped" in s]
        assert not said or said[0].startswith("the consumer is connected; ")


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
@pytest.mark.parametrize("kind", ["idle", "trickling"])
def test_strays_time_out_and_are_counted(kind, secret):
    # Strays that never finish their handshake are dropped after the
    # handshake timeout, however they trickle, and counted in what the
    # producer says when its consumer comes.
    port = free_port()
    p = Producer(port, secret, auth_timeout=0.3)
    socks = [stray(port, kind) for _ in range(4)]
    deadline = time.monotonic() + 5
    while len(p.refused) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(p.refused) == 4 and p.reasons() == ["timeout"]
    for s in socks:  # dropped: the producer closed its end
        s.settimeout(2)
        try:
            while s.recv(1 << 16):
                pass
        except ConnectionResetError:
            pass
        s.close()
    run_pair(port, p, secret)
    assert "the consumer is connected; 4 other connections were dropped before they completed the handshake" in p.said


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
def test_strays_during_the_consumers_arrival(secret):
    # Strays of every kind keep arriving, from the consumer's address, while
    # it dials and shakes hands: it is served, redialing when the gate
    # evicts it.
    port = free_port()
    p = Producer(port, secret, auth_timeout=0.5)
    stop = threading.Event()
    socks = []

    def storm():
        kinds = ["idle", "trickling", "garbage", "closed"]
        i = 0
        while not stop.is_set():
            try:
                socks.append(stray(port, kinds[i % 4]))
            except OSError:
                pass
            i += 1
            time.sleep(0.005)

    t = threading.Thread(target=storm, daemon=True)
    t.start()
    time.sleep(0.1)
    try:
        run_pair(port, p, secret)
    finally:
        stop.set()
        t.join(10)
        for s in socks:
            if s is not None:
                s.close()
    assert p.refused, "no stray was refused"


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
def test_survives_200_strays(secret):
    # 200 idle strays, more than the gate holds: the oldest are evicted (or,
    # while every pending one is in its grace, the newcomer is refused as
    # busy), the producer holds at most 64 pending, and its consumer is
    # served.
    port = free_port()
    p = Producer(port, secret, auth_timeout=5)
    socks = []
    for i in range(200):
        socks.append(stray(port, "idle", source=f"127.0.{1 + i // 8}.{1 + i % 8}"))
    deadline = time.monotonic() + 10
    while len(p.refused) < 200 - 64 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(p.refused) == 200 - 64 and set(p.reasons()) <= {"evicted", "busy"}
    said = []
    run_pair(port, p, secret, said=said)
    for s in socks:
        s.close()
    assert any(s.startswith("the consumer is connected; ") and "other connections were dropped" in s
               for s in p.said), p.said


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
def test_cap_per_source(secret):
    # One address holds at most 8 pending connections: its oldest give way
    # (or the newest are refused while the oldest are in their grace), and a
    # consumer from another address is not touched.
    port = free_port()
    p = Producer(port, secret, auth_timeout=5)
    socks = [stray(port, "idle", source="127.0.0.2") for _ in range(20)]
    deadline = time.monotonic() + 10
    while len(p.refused) < 12 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    assert len(p.refused) == 12 and set(p.reasons()) <= {"evicted", "busy"}
    assert {r for r, _ in p.refused} <= {f"127.0.0.2:{s.getsockname()[1]}" for s in socks}
    run_pair(port, p, secret)
    for s in socks:
        s.close()


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
def test_consumer_redials_when_dropped(secret):
    # A producer that drops the first connections before the handshake
    # ended (a plain listener here, busy as a gate would be) is dialed again,
    # and the consumer is served by the real producer that follows it.
    port = free_port()
    ls = socket.create_server(("127.0.0.1", port))
    said = []
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("c", consume(port, secret, said=said)), daemon=True)
    t.start()
    for _ in range(3):
        s, _ = ls.accept()
        s.close()
    ls.close()
    p = Producer(port, secret)
    c = produce(p)
    t.join(30)
    assert "c" in box
    box["c"].close()
    c.close()
    assert any("dropped the connection before the handshake ended; dialing again" in s for s in said), said


@pytest.mark.parametrize("secret", ["", SECRET], ids=["open", "secret"])
def test_consumer_redials_until_its_timeout(secret):
    port = free_port()
    ls = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def drop_all():
        ls.settimeout(0.1)
        while not stop.is_set():
            try:
                s, _ = ls.accept()
                s.close()
            except socket.timeout:
                pass

    t = threading.Thread(target=drop_all, daemon=True)
    t.start()
    start = time.monotonic()
    try:
        with pytest.raises(tc.Fail, match="dropped every connection before the handshake ended"):
            tc.connect("127.0.0.1", port, 1.0, secret, lambda s: None)
    finally:
        stop.set()
        t.join(5)
        ls.close()
    assert 0.9 <= time.monotonic() - start < 5


def test_wrong_secret_is_an_error_at_once():
    # A producer that refuses this side (another secret) is not dialed
    # again; the producer counts it and serves the real consumer.
    port = free_port()
    p = Producer(port, SECRET, auth_timeout=2)
    start = time.monotonic()
    with pytest.raises(tc.PeerError, match="secret differs"):
        tc.connect("127.0.0.1", port, 10, "another-secret", lambda s: None)
    assert time.monotonic() - start < 5
    run_pair(port, p, SECRET)
    assert [r for _, r in p.refused] == ["bad_proof"]


def test_consumer_refusing_the_run_ends_serve():
    # Without a secret, a connection that answers hello with error is the
    # consumer refusing the run: serve ends with its error, as Go's does.
    port = free_port()
    p = Producer(port, "")
    c, _ = tc.connect("127.0.0.1", port, 10, "", lambda s: None)
    c.send(tc.Msg(type=tc.ERROR, error="give both the same --num-transfers"))
    with pytest.raises(tc.PeerError, match="same --num-transfers"):
        p.join()
    c.close()
