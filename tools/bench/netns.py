"""Two hosts on one machine: a pair of network namespaces joined by a veth pair.

The loopback rows of docs/BENCHMARKS.md run both ends on 127.0.0.1, where
xfer gives its connections reno and the kernel skips the device layer. With
--netns, peers.py and kv.py run every server (xfer serve, xfer kv serve,
iperf3 -s, qperf, sockperf sr, redis-server) in one namespace and every
client in the other, across a veth pair with the system's default TCP
congestion control at both ends (xfer's auto mode sees a peer at another
host's address and leaves the default alone), optionally with a netem delay
on each end's egress (--netem-delay 50us: 100 µs more per round trip).

    server namespace  10.77.0.1/24  --veth (MTU 1500)--  10.77.0.2/24  client namespace

Both namespaces carry this process's id in their names, so that runs side by
side do not collide; they are removed when the run ends, however it ends
short of SIGKILL (Link.close, and SIGTERM and SIGHUP become SystemExit), and
a later run removes those of runs that died with SIGKILL. Needs root and
iproute2's ip (tc too for --netem-delay).
"""
import os
import re
import shutil
import signal
import subprocess
import time

SERVER_ADDR, CLIENT_ADDR, PREFIX_LEN = "10.77.0.1", "10.77.0.2", 24
MTU = 1500
NAME = "xfer-bench"  # namespaces: xfer-bench-PID-s and xfer-bench-PID-c
NS_RE = re.compile(rf"^{NAME}-(\d+)-[sc]$")


class Error(Exception):
    """The link cannot be made: not root, ip or tc missing, or a command of theirs failed."""


def check_delay_arg(ap, on, delay):
    """Fails the command line (argparse's ap) unless --netem-delay delay is
    absent, or given with --netns (on) and a delay parse_delay reads."""
    if delay and not on:
        ap.error("--netem-delay needs --netns")
    if delay:
        try:
            parse_delay(delay)
        except ValueError as e:
            ap.error(str(e))


def parse_delay(text):
    """A netem delay such as 50us, 0.2ms or 1ms, as tc takes it; ValueError otherwise."""
    if not re.fullmatch(r"\d+(\.\d+)?(us|ms)", text or "") or float(re.sub(r"[a-z]+$", "", text)) <= 0:
        raise ValueError(f"netem delay {text!r}: give a positive number with us or ms, e.g. 50us")
    return text


def suffix(delay=None):
    """The suffix of the targets' ids in netns mode: -netns, or -netns-50us with a netem delay."""
    return "-netns" + (f"-{delay}" if delay else "")


def _ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise Error(f"ip {' '.join(args)}: {r.stderr.strip() or 'exit %d' % r.returncode}")
    return r.stdout


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def check(delay=None):
    """Raises Error when this process cannot make the link."""
    if os.geteuid() != 0:
        raise Error("--netns needs root (ip netns add); run it as root or under sudo")
    if not shutil.which("ip"):
        raise Error("--netns needs iproute2's ip (apt-get install -y iproute2)")
    if delay and not shutil.which("tc"):
        raise Error("--netem-delay needs iproute2's tc (apt-get install -y iproute2)")


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


class Link:
    """Two namespaces and the veth between them. Use it as a context manager:
    it is up inside the with block and removed on every way out of it."""

    def __init__(self, delay=None):
        self.delay = delay
        pid = os.getpid()
        self.server_ns, self.client_ns = f"{NAME}-{pid}-s", f"{NAME}-{pid}-c"
        self.server_if, self.client_if = f"xb{pid}s", f"xb{pid}c"  # at most 15 characters
        self.server_addr, self.client_addr = SERVER_ADDR, CLIENT_ADDR
        self.congestion = None
        self._saved = {}

    def __enter__(self):
        check(self.delay)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._saved[sig] = signal.signal(sig, _on_signal)
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _up(self):
        removed = remove_stale()
        if removed:
            print(f"netns: removed the namespaces of runs that are gone: {', '.join(removed)}", flush=True)
        cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
        _ip("netns", "add", self.server_ns)
        _ip("netns", "add", self.client_ns)
        _ip("link", "add", self.server_if, "netns", self.server_ns, "mtu", str(MTU), "type", "veth",
            "peer", "name", self.client_if, "netns", self.client_ns, "mtu", str(MTU))
        for ns, dev, addr in ((self.server_ns, self.server_if, self.server_addr),
                              (self.client_ns, self.client_if, self.client_addr)):
            _ip("-n", ns, "addr", "add", f"{addr}/{PREFIX_LEN}", "dev", dev)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
            # The system's default congestion control, as a host of its own
            # would have it (a new namespace may start with another).
            _ip("netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}")
            if self.delay:
                r = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", "delay",
                                    self.delay], capture_output=True, text=True)
                if r.returncode != 0:
                    raise Error(f"tc qdisc add dev {dev} root netem delay {self.delay}: {r.stderr.strip()} "
                                "(a kernel without netem, CONFIG_NET_SCH_NETEM, cannot: run without --netem-delay)")
        self.congestion = cc
        # The veth's carrier comes up a moment after both ends are set up.
        for _ in range(50):
            if all(" UP " in _ip("-n", ns, "-br", "link", "show", "dev", dev) + " "
                   for ns, dev in ((self.server_ns, self.server_if), (self.client_ns, self.client_if))):
                return
            time.sleep(0.05)
        raise Error(f"the veth {self.server_if}/{self.client_if} did not come up within 2.5 s")

    def close(self):
        """Removes both namespaces (and so the veth); safe to call again."""
        for ns in (self.client_ns, self.server_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for sig, h in self._saved.items():
            signal.signal(sig, h)
        self._saved = {}

    def server(self, cmd):
        """cmd run in the server's namespace."""
        return ["ip", "netns", "exec", self.server_ns, *cmd]

    def client(self, cmd):
        """cmd run in the client's namespace."""
        return ["ip", "netns", "exec", self.client_ns, *cmd]

    def describe(self):
        d = f", netem delay {self.delay} each way" if self.delay else ""
        return (f"two network namespaces ({self.server_ns} at {self.server_addr}, {self.client_ns} at "
                f"{self.client_addr}) joined by a veth pair, MTU {MTU}, congestion control {self.congestion} "
                f"at both ends{d}")


def remove_stale():
    """Removes the namespaces of this module whose process is gone; their names."""
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    except OSError:
        return []
    gone = []
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NS_RE.match(name)
        if m and not _alive(int(m.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            gone.append(name)
    return gone
