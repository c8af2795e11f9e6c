package verbs

import (
	"net/netip"
	"slices"
	"testing"
)

func railGID(t *testing.T, s string) [16]byte {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a.As16()
}

func railGIDs(t *testing.T, addrs []string) [][16]byte {
	t.Helper()
	var gids [][16]byte
	for _, s := range addrs {
		gids = append(gids, railGID(t, s))
	}
	return gids
}

// pairRails pairs rails by their GIDs' networks, falls back to the index
// order where the GIDs say nothing, and gives both sides the same pairs.
func TestRailPairing(t *testing.T) {
	for _, c := range []struct {
		name             string
		dialer, acceptor []string
		want             [][2]int
	}{
		{"one subnet per rail, listed in another order",
			[]string{"::ffff:10.1.0.5", "::ffff:10.2.0.5", "::ffff:10.3.0.5"},
			[]string{"::ffff:10.3.7.9", "::ffff:10.1.7.9", "::ffff:10.2.7.9"},
			[][2]int{{0, 1}, {1, 2}, {2, 0}}},
		{"link-local GIDs (InfiniBand, RoCE v1): by index",
			[]string{"fe80::1:2:3:4", "fe80::5:6:7:8"},
			[]string{"fe80::9:a:b:c", "fe80::d:e:f:1"},
			[][2]int{{0, 0}, {1, 1}}},
		{"same GID type first",
			[]string{"fe80::1", "::ffff:192.168.4.2"},
			[]string{"::ffff:192.168.4.3", "fe80::2"},
			[][2]int{{0, 1}, {1, 0}}},
		{"IPv6 subnet prefixes, not interface IDs",
			[]string{"2001:db8:0:1::aaaa", "2001:db8:0:2::aaaa"},
			[]string{"2001:db8:0:2::bbbb", "2001:db8:0:1::aaab"},
			[][2]int{{0, 1}, {1, 0}}},
		{"more rails on the acceptor: the reachable ones",
			[]string{"::ffff:10.2.0.1"},
			[]string{"::ffff:10.1.0.2", "::ffff:10.2.0.2"},
			[][2]int{{0, 1}}},
		{"more rails on the dialer",
			[]string{"::ffff:10.1.0.1", "::ffff:10.2.0.1", "::ffff:10.3.0.1"},
			[]string{"::ffff:10.3.0.2"},
			[][2]int{{2, 0}}},
		{"no common subnet: by index",
			[]string{"::ffff:10.1.0.1", "::ffff:10.2.0.1"},
			[]string{"::ffff:172.16.0.1", "::ffff:172.16.0.2"},
			[][2]int{{0, 0}, {1, 1}}},
		{"none", nil, []string{"::ffff:10.1.0.1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, a := railGIDs(t, c.dialer), railGIDs(t, c.acceptor)
			got := pairRails(d, a)
			if !slices.Equal(got, c.want) {
				t.Fatalf("pairRails = %v, want %v", got, c.want)
			}
		})
	}
}

// railZero takes rail 0 by reachability too: the pair of the most shared
// network bits, wherever the two sides list their devices, and each
// side's first device where the GIDs say nothing; the other rails follow
// in the dialer's order, and both sides get the same pairs.
func TestRailZero(t *testing.T) {
	for _, c := range []struct {
		name             string
		dialer, acceptor []string
		zero             [2]int
		rest             [][2]int
	}{
		{"the acceptor lists its devices in another order",
			[]string{"::ffff:10.1.0.5", "::ffff:10.2.0.5"},
			[]string{"::ffff:10.2.7.9", "::ffff:10.1.7.9"},
			[2]int{0, 1}, [][2]int{{1, 0}}},
		{"the dialer's first device shares no subnet with the acceptor's",
			[]string{"::ffff:10.3.0.1", "::ffff:10.1.0.1", "::ffff:10.2.0.1"},
			[]string{"::ffff:10.1.0.2", "::ffff:10.2.0.2"},
			[2]int{1, 0}, [][2]int{{2, 1}}},
		{"link-local GIDs: each side's first device",
			[]string{"fe80::1:2:3:4", "fe80::5:6:7:8"},
			[]string{"fe80::9:a:b:c", "fe80::d:e:f:1"},
			[2]int{0, 0}, [][2]int{{1, 1}}},
		{"no common subnet: by index",
			[]string{"::ffff:10.1.0.1", "::ffff:10.2.0.1"},
			[]string{"::ffff:172.16.0.1", "::ffff:172.16.0.2"},
			[2]int{0, 0}, [][2]int{{1, 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, a := railGIDs(t, c.dialer), railGIDs(t, c.acceptor)
			zero, rest := railZero(d, a)
			if zero != c.zero || !slices.Equal(rest, c.rest) {
				t.Fatalf("railZero = %v %v, want %v %v", zero, rest, c.zero, c.rest)
			}
			// Every rail of the side with fewer is paired once.
			usedD, usedA := map[int]bool{zero[0]: true}, map[int]bool{zero[1]: true}
			for _, pr := range rest {
				if usedD[pr[0]] || usedA[pr[1]] {
					t.Fatalf("railZero = %v %v: a device is in two rails", zero, rest)
				}
				usedD[pr[0]], usedA[pr[1]] = true, true
			}
			if n := min(len(d), len(a)); 1+len(rest) != n {
				t.Fatalf("railZero = %v %v: %d rails, want %d", zero, rest, 1+len(rest), n)
			}
		})
	}
}
