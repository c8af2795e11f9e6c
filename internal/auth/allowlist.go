package auth

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Allowlist is the networks callers may connect from; an empty one allows
// every address.
type Allowlist []netip.Prefix

// ParseAllowlist parses CIDRs (10.0.0.0/8, fd00::/8) and single
// addresses. Its error quotes the entry it could not parse.
func ParseAllowlist(list []string) (Allowlist, error) {
	var out Allowlist
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8, fd00::/8) or an address", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Allows reports whether a connection from addr may speak: always with an
// empty list, else when addr is a TCP address in one of its networks (an
// IPv4-mapped IPv6 address counts as IPv4).
func (l Allowlist) Allows(addr net.Addr) bool {
	if len(l) == 0 {
		return true
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	a, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range l {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
