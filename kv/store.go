package kv

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/mem"
)

// FullPolicy is what the server does when a PUT does not fit the pool.
type FullPolicy string

const (
	// Evict removes the least recently used values until the new one fits.
	Evict FullPolicy = "evict"
	// Reject fails the PUT with ErrFull.
	Reject FullPolicy = "reject"
)

// ParseFullPolicy parses "evict" or "reject" ("" means evict).
func ParseFullPolicy(s string) (FullPolicy, error) {
	switch FullPolicy(s) {
	case "", Evict:
		return Evict, nil
	case Reject:
		return Reject, nil
	}
	return "", fmt.Errorf("full policy %q: must be evict or reject", s)
}

// slot is one stored value: a block of the server's pool that is written
// once, by the PUT that allocated it, and never again. Overwriting a key
// commits a new slot; the old one is freed when its last reader is done, so
// a reader never sees a torn value.
type slot struct {
	buf  mem.Buffer
	n    int
	ver  uint64
	key  string
	refs int           // the map's reference plus one per reader; guarded by store.mu
	elem *list.Element // in store.lru while the slot is in the map
}

func (s *slot) value() []byte { return s.buf.Bytes()[:s.n] }

// store maps keys to slots, with an LRU list for eviction. Its critical
// sections are a map access and a list move: the data itself is copied by
// the transports outside the lock.
type store struct {
	pool   *mem.Pool
	policy FullPolicy

	mu    sync.Mutex
	m     map[string]*slot
	lru   list.List // front = most recently used
	bytes uint64    // sum of stored value lengths
	ver   uint64

	evictions, rejected, aborted atomic.Uint64
}

func newStore(pool *mem.Pool, policy FullPolicy) *store {
	return &store{pool: pool, policy: policy, m: make(map[string]*slot)}
}

// acquire returns key's slot with a reader reference, or nil.
func (st *store) acquire(key []byte) *slot {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[string(key)] // no allocation for the lookup
	if s == nil {
		return nil
	}
	s.refs++
	st.lru.MoveToFront(s.elem)
	return s
}

// release drops a reference and frees the slot's memory with the last one.
func (st *store) release(s *slot) {
	st.mu.Lock()
	s.refs--
	last := s.refs == 0
	st.mu.Unlock()
	if last {
		st.pool.Free(s.buf)
	}
}

// errFull is wrapped by reserve's errors when nothing could make room.
var errFull = errors.New("pool full")

// reserve allocates a block of n bytes for a PUT in progress, evicting least
// recently used values under the evict policy. It returns the block and the
// number of values evicted.
func (st *store) reserve(ctx context.Context, n int) (mem.Buffer, int, error) {
	size := max(n, 1) // a zero-length value still gets its own slot
	evicted := 0
	for {
		b, err := st.pool.Alloc(size)
		if err == nil {
			return b, evicted, nil
		}
		if !errors.Is(err, mem.ErrPoolExhausted) {
			return mem.Buffer{}, evicted, err
		}
		if err := ctx.Err(); err != nil {
			return mem.Buffer{}, evicted, err
		}
		if st.policy == Reject {
			st.rejected.Add(1)
			ps := st.pool.Stats()
			return mem.Buffer{}, 0, fmt.Errorf("%w: no room for %d bytes (%d of %d in use, largest free block %d); the server's full policy is reject",
				errFull, n, ps.InUse, ps.Capacity, ps.LargestFree)
		}
		if !st.evictOldest() {
			st.rejected.Add(1)
			ps := st.pool.Stats()
			return mem.Buffer{}, evicted, fmt.Errorf("%w: no room for %d bytes with every value evicted (%d of %d bytes held by reads and puts in progress)",
				errFull, n, ps.InUse, ps.Capacity)
		}
		evicted++
	}
}

// evictOldest removes the least recently used value; false when none is left.
func (st *store) evictOldest() bool {
	st.mu.Lock()
	e := st.lru.Back()
	if e == nil {
		st.mu.Unlock()
		return false
	}
	s := e.Value.(*slot)
	st.unlink(s)
	s.refs--
	last := s.refs == 0
	st.mu.Unlock()
	st.evictions.Add(1)
	if last {
		st.pool.Free(s.buf)
	}
	return true
}

// unlink removes s from the map and the LRU list; st.mu is held.
func (st *store) unlink(s *slot) {
	delete(st.m, s.key)
	st.lru.Remove(s.elem)
	s.elem = nil
	st.bytes -= uint64(s.n)
}

// commit makes the first n bytes of b, filled by a PUT, the value of key and
// returns its version. The value it replaces is freed once no reader holds it.
//
// A value that no reader holds is replaced in its slot, which keeps its key
// and its place in the LRU list (moved to the front): an overwrite
// allocates nothing, so a server under PUTs makes no garbage.
func (st *store) commit(key []byte, b mem.Buffer, n int) uint64 {
	st.mu.Lock()
	st.ver++
	ver := st.ver
	if old := st.m[string(key)]; old != nil && old.refs == 1 {
		oldBuf := old.buf
		st.bytes += uint64(n) - uint64(old.n)
		old.buf, old.n, old.ver = b, n, ver
		st.lru.MoveToFront(old.elem)
		st.mu.Unlock()
		st.pool.Free(oldBuf)
		return ver
	}
	s := &slot{buf: b, n: n, ver: ver, key: string(key), refs: 1}
	old := st.m[s.key]
	var freeOld bool
	if old != nil {
		st.unlink(old)
		old.refs--
		freeOld = old.refs == 0
	}
	st.m[s.key] = s
	s.elem = st.lru.PushFront(s)
	st.bytes += uint64(n)
	st.mu.Unlock()
	if freeOld {
		st.pool.Free(old.buf)
	}
	return ver
}

// abort frees a block reserve returned, for a PUT that failed.
func (st *store) abort(b mem.Buffer) {
	st.aborted.Add(1)
	st.pool.Free(b)
}

// remove deletes key; false when it was not there.
func (st *store) remove(key []byte) bool {
	st.mu.Lock()
	s := st.m[string(key)]
	if s == nil {
		st.mu.Unlock()
		return false
	}
	st.unlink(s)
	s.refs--
	last := s.refs == 0
	st.mu.Unlock()
	if last {
		st.pool.Free(s.buf)
	}
	return true
}

// counts returns the number of keys and the bytes of their values.
func (st *store) counts() (keys int, bytes uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m), st.bytes
}

// retain drops the values whose key keep rejects, and returns how many.
func (st *store) retain(keep func(key string) bool) int {
	st.mu.Lock()
	var free []mem.Buffer
	n := 0
	for k, s := range st.m {
		if keep(k) {
			continue
		}
		n++
		st.unlink(s)
		s.refs--
		if s.refs == 0 {
			free = append(free, s.buf)
		}
	}
	st.mu.Unlock()
	for _, b := range free {
		st.pool.Free(b)
	}
	return n
}

// clear drops every value (Close, and a clustered server that lost its
// place).
func (st *store) clear() {
	st.mu.Lock()
	var free []mem.Buffer
	for _, s := range st.m {
		st.lru.Remove(s.elem)
		s.refs--
		if s.refs == 0 {
			free = append(free, s.buf)
		}
	}
	clear(st.m)
	st.bytes = 0
	st.mu.Unlock()
	for _, b := range free {
		st.pool.Free(b)
	}
}
