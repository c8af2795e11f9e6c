// Package placement places the keys of a KV cluster on its servers by
// consistent hashing. Each server owns Points points on a 64-bit ring, at
// hashes of its node ID; a key belongs to the server of the first point at
// or after the key's hash, and its replicas to the next distinct servers
// clockwise from there.
//
// A lookup is a binary search over the points: O(log N) for N servers,
// where rendezvous hashing (which this replaced) weighs every server for
// every key. A join moves keys only to the joiner, and a leave moves only
// the leaver's keys: a server that stays never loses a key because
// another one left, so a leave needs no rescan of its store.
//
// Clients and servers must place alike: the ring is a function of the
// sorted set of node IDs, Points and the two hashes below, and nothing
// else. Changing any of them changes where keys live, so the code is kept
// here, by hand, rather than in a library whose next release could move
// every key of a running cluster.
package placement

import (
	"iter"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Points is the number of points each server owns on the ring. With P
// points the share of keys a server owns deviates from 1/N by about
// 1/sqrt(P) (6 % at 256).
const Points = 256

// Ring is an immutable placement of keys on a set of servers.
type Ring struct {
	ids    []string // sorted, distinct
	points []uint64 // sorted
	owners []int32  // owners[i] is the index in ids of points[i]'s server
	// lut[b] is the index of the first point whose top shift bits are at
	// least b: a lookup reads one entry and then, on average, about one
	// point, whatever N (a binary search alone misses the cache log N
	// times on a large ring).
	lut   []int32
	shift uint
}

// Key is the hash that places key.
func Key(key string) uint64 { return xxhash.Sum64String(key) }

// KeyBytes is Key of string(key), without the copy.
func KeyBytes(key []byte) uint64 { return xxhash.Sum64(key) }

// mix is splitmix64's finaliser.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// New returns the ring of the servers ids (in any order; duplicates are
// dropped).
func New(ids []string) *Ring {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	type point struct {
		h     uint64
		owner int32
	}
	ps := make([]point, 0, len(s)*Points)
	for i, id := range s {
		seed := xxhash.Sum64String(id)
		for j := range uint64(Points) {
			ps = append(ps, point{mix(seed + (j+1)*0x9e3779b97f4a7c15), int32(i)})
		}
	}
	// Equal hashes (a 2^-64 event per pair) go to the server first by ID,
	// so that every ring of the same IDs is the same.
	slices.SortFunc(ps, func(a, b point) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return int(a.owner - b.owner)
	})
	r := &Ring{ids: s, points: make([]uint64, len(ps)), owners: make([]int32, len(ps))}
	for i, p := range ps {
		r.points[i], r.owners[i] = p.h, p.owner
	}
	bits := uint(1)
	for 1<<bits < len(ps) {
		bits++
	}
	r.shift = 64 - bits
	r.lut = make([]int32, 1<<bits+1)
	i := 0
	for b := range r.lut {
		for i < len(ps) && r.points[i]>>r.shift < uint64(b) {
			i++
		}
		r.lut[b] = int32(i)
	}
	return r
}

// IDs returns the ring's servers, sorted. The caller must not modify it.
func (r *Ring) IDs() []string { return r.ids }

// Len returns the number of servers.
func (r *Ring) Len() int { return len(r.ids) }

// Index returns id's index in IDs, or -1.
func (r *Ring) Index(id string) int {
	if i, ok := slices.BinarySearch(r.ids, id); ok {
		return i
	}
	return -1
}

// start is the index of the first point at or after h, wrapping.
func (r *Ring) start(h uint64) int {
	i := int(r.lut[h>>r.shift])
	for end := int(r.lut[h>>r.shift+1]); i < end && r.points[i] < h; i++ {
	}
	if i == len(r.points) {
		i = 0
	}
	return i
}

// Owner returns the index of the server of a key with hash h, or -1 when
// the ring is empty.
func (r *Ring) Owner(h uint64) int {
	if len(r.points) == 0 {
		return -1
	}
	return int(r.owners[r.start(h)])
}

// Order yields the indexes of the servers of a key with hash h in
// placement order: its owner, then its replicas' servers, then every other
// server, each once.
func (r *Ring) Order(h uint64) iter.Seq[int] {
	return func(yield func(int) bool) {
		if len(r.points) == 0 {
			return
		}
		// The servers yielded: the first 8 in an array (no allocation for
		// the usual few), past that in a set.
		var small [8]int32
		var set []bool
		count := 0
		i := r.start(h)
		for n := 0; n < len(r.points) && count < len(r.ids); n++ {
			o := r.owners[i]
			if i++; i == len(r.points) {
				i = 0
			}
			switch {
			case set != nil:
				if set[o] {
					continue
				}
				set[o] = true
			case slices.Contains(small[:count], o):
				continue
			case count < len(small):
				small[count] = o
			default:
				set = make([]bool, len(r.ids))
				for _, s := range small {
					set[s] = true
				}
				set[o] = true
			}
			count++
			if !yield(int(o)) {
				return
			}
		}
	}
}

// Holds reports whether server idx is one of the first reps servers of a
// key with hash h (reps 1: its owner).
func (r *Ring) Holds(h uint64, idx, reps int) bool {
	if idx < 0 || idx >= len(r.ids) {
		return false
	}
	if reps <= 1 {
		return r.Owner(h) == idx
	}
	n := 0
	for o := range r.Order(h) {
		if o == idx {
			return true
		}
		if n++; n >= reps {
			break
		}
	}
	return false
}

// Added reports whether next has a server that r has not.
func (r *Ring) Added(next *Ring) bool {
	for _, id := range next.ids {
		if r.Index(id) < 0 {
			return true
		}
	}
	return false
}
