package tcp

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/xferio/xfer/internal/sys"
)

// TCP congestion control (Config.Congestion, tcp.congestion). Each socket
// gets its algorithm before its connection exists: the dialer's in
// net.Dialer's Control (DialControl), the acceptor's from the listener
// (ListenControl), whose algorithm every accepted connection inherits. An
// algorithm set on an established connection keeps what the old one left
// behind: a socket born with BBR keeps BBR's pacing, a timer per segment,
// under any algorithm set later (docs/TUNING.md, "Congestion control
// between two sockets of one host"). The engine's own connections, which
// its handshake dials and accepts and every transport then takes over,
// follow the engine's tcp section.

// DialControl is a net.Dialer Control for c.Congestion: under auto, a
// connection to this host (a loopback address, or one of the host's own)
// gets SameHostCongestion; under a name, every connection gets it, and a
// kernel that refuses it fails the dial.
func (c Config) DialControl(network, address string, rc syscall.RawConn) error {
	return c.setCongestion(rc, func() bool {
		ap, err := netip.ParseAddrPort(address)
		return err == nil && hostAddr(ap.Addr())
	})
}

// ListenControl is a net.ListenConfig Control for c.Congestion: under auto
// the listener gets SameHostCongestion, which connections accepted from
// other hosts give back (Accepted); under a name, every accepted
// connection gets it, and a kernel that refuses it fails the listen.
func (c Config) ListenControl(network, address string, rc syscall.RawConn) error {
	return c.setCongestion(rc, func() bool { return true })
}

// setCongestion gives the socket behind rc the congestion control of
// c.Congestion; sameHost tells, under auto, whether its peers are on this
// host. Under auto a failure is no error: the system's default works too,
// only slower.
func (c Config) setCongestion(rc syscall.RawConn, sameHost func() bool) error {
	switch name := c.Congestion; name {
	case CongestionSystem:
		return nil
	case "", CongestionAuto:
		if sameHost() {
			_ = sys.SetCongestion(rc, SameHostCongestion)
		}
		return nil
	default:
		if err := sys.SetCongestion(rc, name); err != nil {
			return fmt.Errorf("tcp.congestion: %w", err)
		}
		return nil
	}
}

// Accepted gives nc, a connection accepted from a listener made with
// ListenControl, its own congestion control: under auto, one from another
// host gets the system's default back, so that only peers on this host get
// reno. Setting an algorithm on a connection born with reno leaves nothing
// of reno behind (reno does not pace). Under any other mode it does
// nothing: nc inherited the listener's.
func (c Config) Accepted(nc net.Conn) {
	if m := c.Congestion; m != "" && m != CongestionAuto {
		return
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok || sameHost(tc.LocalAddr(), tc.RemoteAddr()) {
		return
	}
	def, err := sys.DefaultCongestion()
	if err != nil {
		return
	}
	if rc, err := tc.SyscallConn(); err == nil {
		_ = sys.SetCongestion(rc, def)
	}
}

// sameHost reports whether a connection between local and remote stays on
// this host: the peer is at a loopback address, or at the address the
// connection arrived on (one of the host's own).
func sameHost(local, remote net.Addr) bool {
	l, ok := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok || !ok2 {
		return false
	}
	return r.IP.IsLoopback() || r.IP.Equal(l.IP)
}

// hostAddr reports whether ip is a loopback address or one of this host's
// interfaces' addresses.
func hostAddr(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() {
		return true
	}
	if ip.IsUnspecified() {
		return true // connecting to 0.0.0.0 or :: reaches this host
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}
