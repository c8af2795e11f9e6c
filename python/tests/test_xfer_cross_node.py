"""python -m xfer.cross_node against itself and against Go's `xfer
transfer`, producer and consumer in two processes over tcp and shm on
loopback: the same flags, the same control channel, the MD5 check."""

import json
import os
import socket
import subprocess
import sys

import pytest


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def command(lang, go_xfer):
    if lang == "go":
        return [go_xfer, "transfer"]
    return [sys.executable, "-m", "xfer.cross_node"]


def run_pair(producer, consumer, transport, mode, go_xfer, extra=(), secret=None):
    pp, cp, ctrl = free_ports(3)
    common = ["--local-host", "127.0.0.1", "--remote-host", "127.0.0.1", "--ctrl-port", str(ctrl),
              "--tensor-size-mb", "4", "--num-transfers", "2", "--transport", transport, "--json",
              "--timeout", "60s", *extra]
    env = dict(os.environ)
    if secret:
        env["XFER_SECRET"] = secret
    prod = subprocess.Popen(command(producer, go_xfer) + ["--role", "producer", "--local-port", str(pp),
                            "--remote-port", str(cp), "--mode", mode] + common,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    cons = subprocess.run(command(consumer, go_xfer) + ["--role", "consumer", "--local-port", str(cp),
                          "--remote-port", str(pp)] + common, capture_output=True, env=env, timeout=120)
    pout, perr = prod.communicate(timeout=120)
    return (prod.returncode, pout.decode(), perr.decode()), (cons.returncode, cons.stdout.decode(), cons.stderr.decode())


def summary(out):
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    return lines[-1], lines[:-1]


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("producer,consumer,mode", [
    ("python", "python", "copy"),
    ("python", "go", "zerocopy"),
    ("go", "python", "copy"),
    ("python", "go", "copy"),
    ("go", "python", "zerocopy"),
])
def test_cross_node(producer, consumer, mode, transport, go_xfer):
    (pc, pout, perr), (cc, cout, cerr) = run_pair(producer, consumer, transport, mode, go_xfer)
    assert pc == 0, perr
    assert cc == 0, cerr
    ps, ptransfers = summary(pout)
    cs, ctransfers = summary(cout)
    assert ps["md5_ok"] is True and cs["md5_ok"] is True
    assert len(ptransfers) == len(ctransfers) == 2
    assert [t["md5"] for t in ptransfers] == [t["md5"] for t in ctransfers]
    assert cs["mode"] == mode and cs["bytes"] == 2 * 4 << 20


@pytest.mark.parametrize("producer,consumer", [("python", "go"), ("go", "python")])
def test_cross_node_secret(producer, consumer, go_xfer):
    # With a shared secret both planes authenticate, Go against Python.
    (pc, pout, perr), (cc, cout, cerr) = run_pair(producer, consumer, "tcp", "copy", go_xfer,
                                                  secret="the-cross-node-secret-of-this-test")
    assert pc == 0, perr
    assert cc == 0, cerr
    assert summary(pout)[0]["md5_ok"] is True and summary(cout)[0]["md5_ok"] is True


def test_mismatched_flags(go_xfer):
    # The sides disagree: both exit non-zero and say why.
    pp, cp, ctrl = free_ports(3)
    env = dict(os.environ)
    base = ["--local-host", "127.0.0.1", "--remote-host", "127.0.0.1", "--ctrl-port", str(ctrl), "--tensor-size-mb", "1",
            "--transport", "tcp", "--timeout", "30s"]
    prod = subprocess.Popen([go_xfer, "transfer", "--role", "producer", "--local-port", str(pp), "--remote-port", str(cp),
                             "--num-transfers", "2"] + base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    cons = subprocess.run([sys.executable, "-m", "xfer.cross_node", "--role", "consumer", "--local-port", str(cp),
                           "--remote-port", str(pp), "--num-transfers", "3"] + base, capture_output=True, env=env,
                          timeout=60)
    _, perr = prod.communicate(timeout=60)
    assert cons.returncode != 0 and b"--num-transfers" in cons.stderr
    assert prod.returncode != 0 and b"--num-transfers" in perr


def test_gpu_mode_says_cuda():
    r = subprocess.run([sys.executable, "-m", "xfer.cross_node", "--role", "producer", "--local-host", "127.0.0.1",
                        "--mode", "gpu"], capture_output=True)
    assert r.returncode == 1 and b"CUDA is not available" in r.stderr
