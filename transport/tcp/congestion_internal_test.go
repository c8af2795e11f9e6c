//go:build linux

package tcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/xferio/xfer/internal/sys"
)

func congestionOf(t *testing.T, c syscall.Conn) string {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	name, err := sys.Congestion(rc)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func procCongestion(t *testing.T, which string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_" + which + "_congestion_control")
	if err != nil {
		t.Skipf("no %s congestion controls to read here: %v", which, err)
	}
	return strings.Fields(string(b))
}

// congestionPair opens a listener and a connection to it over loopback the
// way an engine under tcp.congestion mode does, and returns the listener
// and both ends.
func congestionPair(t *testing.T, mode string) (ln *net.TCPListener, dialed, accepted *net.TCPConn, err error) {
	t.Helper()
	cfg := Config{Congestion: mode}
	lc := net.ListenConfig{Control: cfg.ListenControl}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		got <- c
	}()
	d := net.Dialer{Control: cfg.DialControl}
	dc, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, nil, nil, err
	}
	t.Cleanup(func() { dc.Close() })
	ac := <-got
	if ac == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { ac.Close() })
	cfg.Accepted(ac)
	return l.(*net.TCPListener), dc.(*net.TCPConn), ac.(*net.TCPConn), nil
}

// TestCongestion: under auto both ends of a connection between two sockets
// of this host run reno, from the start (the listener has it); under
// system both keep the system's default; a name is every socket's.
func TestCongestion(t *testing.T) {
	def, err := sys.DefaultCongestion()
	if err != nil {
		t.Skipf("no default congestion control to read: %v", err)
	}
	cases := []struct{ mode, want string }{
		{"", SameHostCongestion},
		{CongestionAuto, SameHostCongestion},
		{CongestionSystem, def},
		{"reno", "reno"},
	}
	// An algorithm other than reno that this process may choose: the
	// system's default always is.
	if allowed := procCongestion(t, "allowed"); def != "reno" {
		cases = append(cases, struct{ mode, want string }{def, def})
	} else if i := slices.IndexFunc(allowed, func(s string) bool { return s != "reno" }); i >= 0 {
		cases = append(cases, struct{ mode, want string }{allowed[i], allowed[i]})
	}
	for _, c := range cases {
		ln, dc, ac, err := congestionPair(t, c.mode)
		if err != nil {
			t.Fatalf("tcp.congestion %q: %v", c.mode, err)
		}
		lrc, err := ln.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		lname, _ := sys.Congestion(lrc)
		for side, got := range map[string]string{"dialer": congestionOf(t, dc), "acceptor": congestionOf(t, ac), "listener": lname} {
			want := c.want
			if side == "listener" && c.mode == CongestionSystem {
				want = def
			}
			if got != want {
				t.Errorf("tcp.congestion %q: the %s runs %s, want %s", c.mode, side, got, want)
			}
		}
	}
}

// TestCongestionUnknown: a name the kernel lacks fails the listen and the
// dial with an error that names the key and what the kernel has.
func TestCongestionUnknown(t *testing.T) {
	const name = "nosuchcc"
	if slices.Contains(procCongestion(t, "available"), name) {
		t.Skipf("this kernel has a congestion control called %s", name)
	}
	cfg := Config{Congestion: name}
	lc := net.ListenConfig{Control: cfg.ListenControl}
	_, lerr := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	d := net.Dialer{Control: cfg.DialControl}
	_, derr := d.Dial("tcp", plain.Addr().String())
	for what, err := range map[string]error{"listen": lerr, "dial": derr} {
		if !errors.Is(err, sys.ErrNoAlgorithm) {
			t.Errorf("%s with tcp.congestion %q: %v, want an error matching sys.ErrNoAlgorithm", what, name, err)
			continue
		}
		for _, want := range []string{"tcp.congestion", name, "available:"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", what, err, want)
			}
		}
	}
}

func TestSameHost(t *testing.T) {
	tcpAddr := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 7000} }
	for _, c := range []struct {
		local, remote net.Addr
		want          bool
	}{
		{tcpAddr("127.0.0.1"), tcpAddr("127.0.0.1"), true},
		{tcpAddr("127.0.0.1"), tcpAddr("127.0.0.2"), true},
		{tcpAddr("::1"), tcpAddr("::1"), true},
		{tcpAddr("10.0.0.1"), tcpAddr("10.0.0.1"), true}, // the host's own address
		{tcpAddr("10.0.0.1"), tcpAddr("10.0.0.2"), false},
		{tcpAddr("fd00::1"), tcpAddr("fd00::2"), false},
		{&net.UnixAddr{Name: "a"}, &net.UnixAddr{Name: "b"}, false},
	} {
		if got := sameHost(c.local, c.remote); got != c.want {
			t.Errorf("sameHost(%v, %v) = %v, want %v", c.local, c.remote, got, c.want)
		}
	}
	for _, c := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"::ffff:127.0.0.1", true}, {"0.0.0.0", true}, {"::1%lo", true},
		{"192.0.2.1", false}, // TEST-NET-1: on no interface
	} {
		if got := hostAddr(netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("hostAddr(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
	// Each of the host's own interface addresses is this host's.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(n.IP)
			if !hostAddr(ip) {
				t.Errorf("hostAddr(%s), an address of this host's interfaces = false", ip)
			}
		}
	}
}
