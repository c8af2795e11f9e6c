// Package regions is the engine's table of registered memory: it numbers
// each region, draws its key, refuses overlaps, finds the region holding a
// local buffer, and checks a peer's access (region, key, rights, range)
// before it pins the region for that access.
//
// Every remote access and every local operation reads the table, so
// readers load an immutable snapshot without locking; registering and
// deregistering copy it under a mutex.
package regions

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// ErrAccess is the error for rights that are neither read, write nor both.
var ErrAccess = errors.New("access must be read, write or read-write")

// Table holds registered regions of the caller's type R, each with the
// handle the transports see of it. The zero value is empty and ready.
type Table[R any] struct {
	mu   sync.Mutex
	snap atomic.Pointer[snapshot[R]]
	next uint32
}

type entry[R any] struct {
	h *mem.Handle
	r R
}

type snapshot[R any] struct {
	byID   map[uint32]entry[R]
	byAddr []entry[R] // regions, not grants, sorted by base address
}

func (t *Table[R]) load() *snapshot[R] {
	if s := t.snap.Load(); s != nil {
		return s
	}
	return &snapshot[R]{}
}

// Add registers mr with access, under a new number and a random key, and
// returns the handle and the caller's value that newR makes for it. A
// grant (part of a registered region) is reached by number only, and may
// overlap; a region may not overlap another.
func (t *Table[R]) Add(mr *mem.Region, access transport.Access, grant bool, newR func(*mem.Handle) R) (R, *mem.Handle, error) {
	var zero R
	if access == 0 || access&^transport.AccessReadWrite != 0 {
		return zero, nil, fmt.Errorf("register: access %d: %w", access, ErrAccess)
	}
	var k [8]byte
	if _, err := rand.Read(k[:]); err != nil {
		return zero, nil, err
	}
	base, n := uint64(mr.Addr()), uint64(mr.Len())
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	if !grant {
		for _, o := range old.byAddr {
			if base < o.h.Base()+o.h.Len() && o.h.Base() < base+n {
				return zero, nil, fmt.Errorf("register [%#x, +%d): overlaps registered region %d", base, n, o.h.ID())
			}
		}
	}
	t.next++
	h := mem.NewHandle(mr, t.next, binary.LittleEndian.Uint64(k[:]), access)
	e := entry[R]{h: h, r: newR(h)}
	s := &snapshot[R]{byID: make(map[uint32]entry[R], len(old.byID)+1), byAddr: old.byAddr}
	if !grant {
		s.byAddr = append(slices.Clone(old.byAddr), e)
		slices.SortFunc(s.byAddr, func(a, b entry[R]) int {
			switch {
			case a.h.Base() < b.h.Base():
				return -1
			case a.h.Base() > b.h.Base():
				return 1
			}
			return 0
		})
	}
	for id, o := range old.byID {
		s.byID[id] = o
	}
	s.byID[h.ID()] = e
	t.snap.Store(s)
	return e.r, h, nil
}

// Remove drops the region of handle h.
func (t *Table[R]) Remove(h *mem.Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	s := &snapshot[R]{byID: make(map[uint32]entry[R], len(old.byID))}
	for id, o := range old.byID {
		if o.h != h {
			s.byID[id] = o
		}
	}
	for _, o := range old.byAddr {
		if o.h != h {
			s.byAddr = append(s.byAddr, o)
		}
	}
	t.snap.Store(s)
}

// Find returns the registered region (not a grant) that holds all of b.
func (t *Table[R]) Find(b []byte) (R, *mem.Handle, bool) {
	s := t.load()
	p := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	n := uint64(len(b))
	i, _ := slices.BinarySearchFunc(s.byAddr, p, func(e entry[R], p uint64) int {
		if e.h.Base() <= p {
			return -1
		}
		return 1
	})
	if i--; i >= 0 {
		e := s.byAddr[i]
		if p-e.h.Base() <= e.h.Len() && n <= e.h.Len()-(p-e.h.Base()) {
			return e.r, e.h, true
		}
	}
	var zero R
	return zero, nil, false
}

// Get returns region id.
func (t *Table[R]) Get(id uint32) (R, bool) {
	e, ok := t.load().byID[id]
	return e.r, ok
}

// Len is the number of registered regions and grants.
func (t *Table[R]) Len() int { return len(t.load().byID) }

// All returns the registered regions (not grants), by address.
func (t *Table[R]) All() []R {
	s := t.load()
	all := make([]R, len(s.byAddr))
	for i, e := range s.byAddr {
		all[i] = e.r
	}
	return all
}

// Check checks a peer's access to [addr, addr+n) of region id with key and
// rights want, and pins the region: the caller releases the result.
func (t *Table[R]) Check(id uint32, key, addr, n uint64, want transport.Access) (transport.Resolved, error) {
	fail := func(kind transport.AccessKind) (transport.Resolved, error) {
		return transport.Resolved{}, &transport.AccessError{Kind: kind, Want: want, Region: id, Addr: addr, Len: n}
	}
	e, ok := t.load().byID[id]
	if !ok {
		return fail(transport.UnknownRegion)
	}
	h := e.h
	switch {
	case h.Key()^key != 0:
		return fail(transport.WrongKey)
	case h.Access()&want != want:
		return fail(transport.NoAccess)
	case addr < h.Base() || addr-h.Base() > h.Len() || n > h.Len()-(addr-h.Base()):
		return fail(transport.OutOfRange)
	case !h.Pin():
		return fail(transport.UnknownRegion)
	}
	off := addr - h.Base()
	return transport.Resolved{Mem: h.Bytes()[off : off+n : off+n], Region: h}, nil
}

// Lookup checks a peer's access to the whole of region id.
func (t *Table[R]) Lookup(id uint32, key uint64, want transport.Access) (transport.Resolved, error) {
	e, ok := t.load().byID[id]
	if !ok {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.UnknownRegion, Want: want, Region: id}
	}
	return t.Check(id, key, e.h.Base(), e.h.Len(), want)
}
