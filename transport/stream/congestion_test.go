//go:build linux

package stream

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
)

// congestionPair builds both streams of conns loopback connections with
// Params.Congestion mode, and returns them, or the first error of New.
func congestionPair(t *testing.T, conns int, mode string) (a, b *Stream, as, bs []net.Conn, err error) {
	t.Helper()
	for range conns {
		x, y := tcpPair(t)
		y.SetReadDeadline(time.Time{})
		as, bs = append(as, x), append(bs, y)
	}
	extra := func(cs []net.Conn) func(context.Context) (net.Conn, error) {
		i := 0
		return func(context.Context) (net.Conn, error) { i++; return cs[i], nil }
	}
	p := transport.Params{Conns: conns, MaxMessage: 4096, RecvDepth: 8, Congestion: mode}
	pa, pb := p, p
	pa.Role, pa.Conn, pa.DialExtra, pa.Host = transport.Dialer, as[0], extra(as), &gatedHost{gate: make(chan struct{})}
	pb.Role, pb.Conn, pb.AcceptExtra, pb.Host = transport.Acceptor, bs[0], extra(bs), &gatedHost{gate: make(chan struct{})}
	if a, err = New(context.Background(), pa, Options{}); err != nil {
		return nil, nil, as, bs, err
	}
	t.Cleanup(func() { a.Close() })
	if b, err = New(context.Background(), pb, Options{}); err != nil {
		return nil, nil, as, bs, err
	}
	t.Cleanup(func() { b.Close() })
	return a, b, as, bs, nil
}

// congestions returns the congestion control of each connection of e, as
// the kernel reports it.
func congestions(t *testing.T, e *Stream) []string {
	t.Helper()
	var out []string
	for _, c := range e.conns {
		name, err := sys.Congestion(c.rc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	return out
}

func procList(t *testing.T, which string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_" + which + "_congestion_control")
	if err != nil {
		t.Skipf("no %s congestion controls to read here: %v", which, err)
	}
	return strings.Fields(string(b))
}

// TestCongestion: under auto every connection between two sockets of this
// host (loopback) runs reno, on both sides; under system each keeps the
// system's default; a name is set on every connection.
func TestCongestion(t *testing.T) {
	def, err := sys.DefaultCongestion()
	if err != nil {
		t.Skipf("no default congestion control to read: %v", err)
	}
	cases := []struct{ mode, want string }{
		{"", transport.SameHostCongestion},
		{transport.CongestionAuto, transport.SameHostCongestion},
		{transport.CongestionSystem, def},
		{"reno", "reno"},
	}
	// A second name, other than reno, where the kernel has one and lets
	// this process choose it: the system's default is always allowed.
	if other := procList(t, "allowed"); def != "reno" || slices.ContainsFunc(other, func(s string) bool { return s != "reno" }) {
		pick := def
		if pick == "reno" {
			pick = other[slices.IndexFunc(other, func(s string) bool { return s != "reno" })]
		}
		cases = append(cases, struct{ mode, want string }{pick, pick})
	}
	for _, c := range cases {
		a, b, _, _, err := congestionPair(t, 3, c.mode)
		if err != nil {
			t.Fatalf("congestion %q: %v", c.mode, err)
		}
		for side, e := range map[string]*Stream{"dialer": a, "acceptor": b} {
			if got := congestions(t, e); slices.ContainsFunc(got, func(s string) bool { return s != c.want }) {
				t.Errorf("congestion %q: the %s's connections run %v, want %s on each", c.mode, side, got, c.want)
			}
		}
	}
}

// TestCongestionUnknown: a name the kernel lacks fails the endpoint with an
// error that names the key and what the kernel has, and closes every
// connection it was given.
func TestCongestionUnknown(t *testing.T) {
	const name = "nosuchcc"
	if slices.Contains(procList(t, "available"), name) {
		t.Skipf("this kernel has a congestion control called %s", name)
	}
	_, _, as, _, err := congestionPair(t, 2, name)
	if !errors.Is(err, sys.ErrNoAlgorithm) {
		t.Fatalf("New with congestion %q: %v, want an error matching sys.ErrNoAlgorithm", name, err)
	}
	for _, want := range []string{"tcp.congestion", name, "available:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for i, c := range as {
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("connection %d: read %v, want it closed by New", i, err)
		}
	}
}

func TestSameHost(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 7000} }
	for _, c := range []struct {
		local, remote net.Addr
		want          bool
	}{
		{tcp("127.0.0.1"), tcp("127.0.0.1"), true},
		{tcp("127.0.0.1"), tcp("127.0.0.2"), true},
		{tcp("::1"), tcp("::1"), true},
		{tcp("10.0.0.1"), tcp("10.0.0.1"), true}, // the host's own address
		{tcp("10.0.0.1"), tcp("10.0.0.2"), false},
		{tcp("fd00::1"), tcp("fd00::2"), false},
		{&net.UnixAddr{Name: "a"}, &net.UnixAddr{Name: "b"}, false},
	} {
		if got := sameHost(c.local, c.remote); got != c.want {
			t.Errorf("sameHost(%v, %v) = %v, want %v", c.local, c.remote, got, c.want)
		}
	}
}
