package verbs

import (
	"bytes"
	"math/bits"
	"sort"
)

// pairRails pairs the dialer's extra rails (rails 1 and on; rail 0 is the
// handshaken connection's) with the acceptor's, by reachability where
// their GIDs say it cheaply, and returns the pairs in the dialer's order:
// pairs[k] = {dialer's rail, acceptor's rail}, both 0-based over the extra
// rails.
//
// A pair of GIDs of one type (both IPv4-mapped, as RoCE v2 over IPv4, or
// both not) scores the bits their networks share: for IPv4 the leading
// bits of the address, for others the leading bits of the 64-bit subnet
// prefix (the interface ID is no network). GIDs of different types score
// below any pair of one type. The pairs are taken best score first; ties
// go in index order, so that rails whose GIDs say nothing (every one in
// fe80::/64, as InfiniBand and RoCE v1 give) pair by index, as before.
//
// Both sides compute it from the same two lists (the dialer's, the
// acceptor's), so both get the same pairs and take their extra
// connections for them in the same order.
func pairRails(dialer, acceptor [][16]byte) [][2]int {
	pairs := pairGreedy(dialer, acceptor)
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	return pairs
}

// railZero pairs all the rails of both sides (rail 0's device included)
// as pairRails does, and returns the best pair, the one taken first, for
// rail 0, and the others in the dialer's order. Its ties go by index, so
// that where the GIDs say nothing rail 0 is each side's first device.
// dialer and acceptor must not be empty.
func railZero(dialer, acceptor [][16]byte) (zero [2]int, rest [][2]int) {
	pairs := pairGreedy(dialer, acceptor)
	rest = pairs[1:]
	sort.Slice(rest, func(i, j int) bool { return rest[i][0] < rest[j][0] })
	return pairs[0], rest
}

// pairGreedy pairs the rails best score first, in the order it takes them.
func pairGreedy(dialer, acceptor [][16]byte) [][2]int {
	type cand struct{ d, a, score int }
	cands := make([]cand, 0, len(dialer)*len(acceptor))
	for d, gd := range dialer {
		for a, ga := range acceptor {
			cands = append(cands, cand{d, a, gidAffinity(gd, ga)})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	usedD := make([]bool, len(dialer))
	usedA := make([]bool, len(acceptor))
	var pairs [][2]int
	for _, c := range cands {
		if usedD[c.d] || usedA[c.a] {
			continue
		}
		usedD[c.d], usedA[c.a] = true, true
		pairs = append(pairs, [2]int{c.d, c.a})
	}
	return pairs
}

// v4Prefix is the start of an IPv4-mapped GID (::ffff:a.b.c.d).
var v4Prefix = [12]byte{10: 0xff, 11: 0xff}

// gidAffinity scores how likely two GIDs are on one network: the leading
// bits their networks share (see pairRails), or -1 for different types.
func gidAffinity(a, b [16]byte) int {
	av4, bv4 := bytes.Equal(a[:12], v4Prefix[:]), bytes.Equal(b[:12], v4Prefix[:])
	if av4 != bv4 {
		return -1
	}
	if av4 {
		x := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
		y := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
		return bits.LeadingZeros32(x ^ y)
	}
	var x, y uint64
	for i := range 8 {
		x = x<<8 | uint64(a[i])
		y = y<<8 | uint64(b[i])
	}
	return bits.LeadingZeros64(x ^ y)
}
