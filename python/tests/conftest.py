"""Fixtures of the xfer binding's tests: real connectors over tcp (and
shm) on loopback, ephemeral ports; and the Go xfer command, for the tests
that run it beside the binding."""

import os
import shutil
import subprocess

import pytest

# The package under test is the one installed in the interpreter that runs
# the tests: make python-test runs them with this checkout's venv, where
# make python installed its wheel.
import xfer

MiB = 1 << 20

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def make_pair(protocol="tcp", pool=64 * MiB, **extra):
    sender = xfer.Connector({"role": "sender", "host": "127.0.0.1", "zmq_port": 0, "protocol": protocol,
                             "memory_pool_size": pool, **extra})
    receiver = xfer.Connector({"role": "receiver", "protocol": protocol, "memory_pool_size": pool,
                               "sender_host": "127.0.0.1", "sender_zmq_port": int(sender.address.rsplit(":", 1)[1]),
                               **extra})
    return sender, receiver


@pytest.fixture(params=["tcp", "shm"])
def pair(request):
    s, r = make_pair(request.param)
    yield s, r
    r.close()
    s.close()


@pytest.fixture
def tcp_pair():
    s, r = make_pair("tcp")
    yield s, r
    r.close()
    s.close()


@pytest.fixture
def sender():
    c = xfer.Connector({"role": "sender", "protocol": "tcp", "memory_pool_size": 16 * MiB})
    yield c
    c.close()


@pytest.fixture(scope="session")
def go_xfer(tmp_path_factory):
    """The xfer command: $XFER_BINARY (make python-test builds it), else built here."""
    b = os.environ.get("XFER_BINARY")
    if b:
        return b
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("no xfer binary: set $XFER_BINARY or put go on PATH")
    out = str(tmp_path_factory.mktemp("bin") / "xfer")
    subprocess.run([go, "build", "-o", out, "./cmd/xfer"], cwd=ROOT, check=True)
    return out
