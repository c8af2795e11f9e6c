package auth

import (
	"net"
	"testing"
)

func TestAllowlist(t *testing.T) {
	l, err := ParseAllowlist([]string{"10.0.0.0/8", " 192.168.1.7 ", "fd00::/8", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }
	for ip, want := range map[string]bool{
		"10.9.9.9": true, "192.168.1.7": true, "192.168.1.8": false, "fd00::1": true,
		"fe80::1": false, "::ffff:10.0.0.1": true, "11.0.0.1": false,
	} {
		if got := l.Allows(tcp(ip)); got != want {
			t.Errorf("Allows(%s): %v, want %v", ip, got, want)
		}
	}
	if l.Allows(&net.UnixAddr{Name: "/tmp/x", Net: "unix"}) {
		t.Error("a non-TCP address is allowed by a list")
	}
	if !Allowlist(nil).Allows(&net.UnixAddr{Name: "/tmp/x", Net: "unix"}) {
		t.Error("an empty list refuses an address")
	}
	if _, err := ParseAllowlist([]string{"10.0.0.0/33"}); err == nil || err.Error() != `"10.0.0.0/33": want a CIDR (10.0.0.0/8, fd00::/8) or an address` {
		t.Errorf("a bad entry: %v", err)
	}
}
