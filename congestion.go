package xfer

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
)

// TCP congestion control (tcp.congestion). Each socket gets its algorithm
// before its connection exists: the dialer's in net.Dialer's Control, the
// acceptor's from the listener, whose algorithm every accepted connection
// inherits. An algorithm set on an established connection keeps what the
// old one left behind: a socket born with BBR keeps BBR's pacing, a timer
// per segment, under any algorithm set later (docs/TUNING.md,
// "Congestion control between two sockets of one host").

// dialControl is the engine's net.Dialer Control: under auto, a connection
// to this host (a loopback address, or one of the host's own) gets
// transport.SameHostCongestion; under a name, every connection gets it,
// and a kernel that refuses it fails the dial.
func (e *Engine) dialControl(network, address string, c syscall.RawConn) error {
	return e.setCongestion(c, func() bool {
		ap, err := netip.ParseAddrPort(address)
		return err == nil && hostAddr(ap.Addr())
	})
}

// listenControl is the engine's net.ListenConfig Control: under auto the
// listener gets transport.SameHostCongestion, which accepted connections
// from other hosts give back (acceptedCongestion); under a name, every
// accepted connection gets it, and a kernel that refuses it fails the
// listen.
func (e *Engine) listenControl(network, address string, c syscall.RawConn) error {
	return e.setCongestion(c, func() bool { return true })
}

// setCongestion gives the socket behind c the congestion control of
// tcp.congestion; sameHost tells, under auto, whether its peers are on
// this host. Under auto a failure is no error: the system's default works
// too, only slower.
func (e *Engine) setCongestion(c syscall.RawConn, sameHost func() bool) error {
	switch name := e.cfg.TCP.Congestion; name {
	case transport.CongestionSystem:
		return nil
	case "", transport.CongestionAuto:
		if sameHost() {
			_ = sys.SetCongestion(c, transport.SameHostCongestion)
		}
		return nil
	default:
		if err := sys.SetCongestion(c, name); err != nil {
			return fmt.Errorf("tcp.congestion: %w", err)
		}
		return nil
	}
}

// acceptedCongestion gives a connection accepted under auto from another
// host the system's default back: only peers on this host get reno.
// Setting an algorithm on a connection born with reno leaves nothing of
// reno behind (reno does not pace).
func (e *Engine) acceptedCongestion(nc net.Conn) {
	if m := e.cfg.TCP.Congestion; m != "" && m != transport.CongestionAuto {
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
