package kv

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/kv/disktier"
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

// pin is a value's protection from eviction (kvpb.Pin).
type pin uint8

const (
	pinNone pin = iota
	pinSoft     // evicted after every unpinned value, until pinUntil
	pinHard     // never evicted
)

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
	elem *list.Element // in store.lru or store.soft while the slot is in the map; nil when hard-pinned
	// lease is the clock reading (store.now) until which a read lease
	// holds the value: no DELETE without force, no eviction. 0: none.
	lease    int64
	pinUntil int64 // the end of a soft pin
	pin      pin
	reps     uint8 // its key's replica count in a cluster (PutRequest.replicas), at least 1
	idx      int   // its index in store.all while in the map
	// vgen is the generation of the cluster's view (the fence's) in which
	// the server last knew it held the key: the view its PUT committed in,
	// or the one a rescan checked it against. 0 outside a cluster.
	vgen atomic.Uint64

	// The disk tier (tier.go); all guarded by store.mu. Without one, every
	// slot is inMem and the rest is zero.
	inMem    bool          // buf holds the value (false: only on disk, until a GET loads it)
	disk     *disktier.Loc // its record on disk, nil when none
	demoting bool          // its write-behind is queued or in flight; out of the LRU lists
	touched  bool          // a GET read it while it was demoting: it stays in memory
	written  chan struct{} // closed when its write-behind is done
	loading  chan struct{} // closed when a GET's load from disk is done
}

func (s *slot) value() []byte { return s.buf.Bytes()[:s.n] }

// putMeta is what a PUT says of the value it stores besides its bytes.
type putMeta struct {
	pin      pin
	pinUntil int64 // a soft pin's end, on the store's clock
	reps     uint8
	vgen     uint64 // the view the PUT commits in (slot.vgen)
}

// store maps keys to slots, with LRU lists for eviction. Its critical
// sections are a map access and a list move: the data itself is copied by
// the transports outside the lock.
//
// Eviction takes the least recently used value whose read lease ended:
// first from lru (the unpinned values), then, unless keepSoft, from soft
// (the soft-pinned ones). Hard-pinned values are in neither list. A soft
// pin that ended moves its value to the back of lru, the first to go.
type store struct {
	pool   *mem.Pool
	policy FullPolicy
	// now is the clock, in nanoseconds on a monotonic scale (tests set
	// their own).
	now      func() int64
	leaseTTL int64 // nanoseconds; 0: no read leases
	keepSoft bool  // soft-pinned values are not evicted while their pin lasts
	hiWater  uint64
	ratio    float64

	mu       sync.Mutex
	m        map[string]*slot
	all      []*slot   // the slots of m, in no order, for scans in slices
	lru      list.List // unpinned values; front = most recently used
	soft     list.List // soft-pinned values, alike
	softNext int64     // no soft pin in soft ends before it
	bytes    uint64    // sum of the lengths of the values in memory
	diskOnly int       // values only on disk
	ver      uint64

	evictions, rejected, aborted atomic.Uint64

	disk *diskTier // nil: no disk tier
}

// storeOptions are the server's options the store applies.
type storeOptions struct {
	leaseTTL time.Duration
	keepSoft bool
	// hiWater is the share of the pool past which a PUT evicts, down by
	// ratio of the used bytes; 0: only when a PUT does not fit.
	hiWater, ratio float64
	now            func() int64 // nil: the monotonic clock
}

func newStore(pool *mem.Pool, policy FullPolicy, o storeOptions) *store {
	base := time.Now()
	st := &store{pool: pool, policy: policy, m: make(map[string]*slot),
		now:      func() int64 { return int64(time.Since(base)) + 1 }, // never 0: 0 is "no lease"
		leaseTTL: int64(max(o.leaseTTL, 0)), keepSoft: o.keepSoft, ratio: o.ratio}
	if o.now != nil {
		st.now = o.now
	}
	if o.hiWater > 0 && o.hiWater < 1 {
		st.hiWater = uint64(o.hiWater * float64(pool.Stats().Capacity))
	}
	return st
}

// listOf is the LRU list s is in, nil for a hard-pinned value.
func (st *store) listOf(s *slot) *list.List {
	switch s.pin {
	case pinSoft:
		return &st.soft
	case pinHard:
		return nil
	}
	return &st.lru
}

// acquire returns key's slot with a reader reference, or nil, and whether
// the value is in memory (with a disk tier, one only on disk is loaded by
// diskTier.load). It grants the value a read lease.
func (st *store) acquire(key []byte) (*slot, bool) {
	var lease int64
	if st.leaseTTL > 0 {
		lease = st.now() + st.leaseTTL
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[string(key)] // no allocation for the lookup
	if s == nil {
		return nil, false
	}
	s.refs++
	s.lease = lease
	if s.elem != nil {
		st.listOf(s).MoveToFront(s.elem)
	} else if s.demoting {
		s.touched = true
	}
	return s, s.inMem
}

// release drops a reference and frees the slot's memory with the last one.
func (st *store) release(s *slot) {
	st.mu.Lock()
	s.refs--
	last := s.refs == 0 && s.inMem
	st.mu.Unlock()
	if last {
		st.pool.Free(s.buf)
	}
}

// errFull is wrapped by reserve's errors when nothing could make room.
var errFull = errors.New("pool full")

// alloc allocates a block for a value of size bytes: with a disk tier, a
// value of a block or more gets whole, aligned blocks, which the tier
// writes and reads in place.
func (st *store) alloc(size int) (mem.Buffer, error) {
	if st.disk != nil && size >= disktier.Block {
		return st.pool.AllocAligned((size+disktier.Block-1)&^(disktier.Block-1), disktier.Block)
	}
	return st.pool.Alloc(size)
}

// reserve allocates a block of n bytes for a PUT in progress, evicting least
// recently used values under the evict policy: when the block does not fit,
// and when the pool's use passes the high watermark. It returns the block
// and the number of values evicted. With a disk tier, evicting a value
// queues its write to disk (its memory is freed once written), and a PUT
// that needs the room waits for the writes.
func (st *store) reserve(ctx context.Context, n int) (mem.Buffer, int, error) {
	size := max(n, 1) // a zero-length value still gets its own slot
	evicted := 0
	for {
		b, err := st.alloc(size)
		if err == nil {
			if st.hiWater > 0 && st.policy == Evict {
				if used := st.pool.InUse(); used > st.hiWater {
					evicted += st.evictDown(used)
				}
			}
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
		if st.disk != nil && st.disk.pendingAtLeast(st, uint64(size)) {
			if err := st.disk.waitWrite(ctx, st); err != nil {
				return mem.Buffer{}, evicted, err
			}
			continue
		}
		switch _, r := st.evictOne(); r {
		case evictedOne:
			evicted++
			continue
		case queueFull:
			if err := st.disk.waitWrite(ctx, st); err != nil {
				return mem.Buffer{}, evicted, err
			}
			continue
		}
		if st.disk != nil && st.disk.pendingAtLeast(st, 1) {
			if err := st.disk.waitWrite(ctx, st); err != nil {
				return mem.Buffer{}, evicted, err
			}
			continue
		}
		st.rejected.Add(1)
		ps := st.pool.Stats()
		return mem.Buffer{}, evicted, fmt.Errorf("%w: no room for %d bytes with every value evicted that may be (%d of %d bytes held by leased or pinned values, reads and puts in progress)",
			errFull, n, ps.InUse, ps.Capacity)
	}
}

// evictDown evicts values of a pool with used bytes in use, past the high
// watermark, until it is back under it and at least ratio of used is
// freed (or, with a disk tier, queued to be), or nothing more may go. It
// returns how many it evicted.
func (st *store) evictDown(used uint64) int {
	target := max(used-st.hiWater, uint64(st.ratio*float64(used)))
	if st.disk != nil {
		if p := st.disk.pendingBytes(st); p < target {
			target -= p
		} else {
			return 0
		}
	}
	var freed uint64
	n := 0
	for freed < target {
		f, r := st.evictOne()
		if r != evictedOne {
			break
		}
		freed += f
		n++
	}
	return n
}

// What evictOne did.
type evictResult uint8

const (
	evictedOne evictResult = iota // evicted, or queued its write to disk
	noneToEvict
	queueFull // the disk tier's write queue is full
)

// evictOne evicts the least recently used value that may go: from lru,
// else (unless keepSoft) from soft, skipping those with a read lease. It
// returns the size of the value's block. With a disk tier, the value goes
// to disk instead (tier.go, demoteLocked).
func (st *store) evictOne() (uint64, evictResult) {
	now := st.now()
	st.mu.Lock()
	st.unpinEndedLocked(now)
	s := oldestUnleased(&st.lru, now)
	if s == nil && !st.keepSoft {
		s = oldestUnleased(&st.soft, now)
	}
	if s == nil {
		st.mu.Unlock()
		return 0, noneToEvict
	}
	size := uint64(s.buf.Len())
	if st.disk != nil {
		return size, st.disk.demoteLocked(st, s) // unlocks st.mu
	}
	st.unlink(s)
	s.refs--
	last := s.refs == 0
	st.mu.Unlock()
	st.evictions.Add(1)
	if last {
		st.pool.Free(s.buf)
	}
	return size, evictedOne
}

// oldestUnleased is the least recently used value of l whose read lease
// ended by now, or nil.
func oldestUnleased(l *list.List, now int64) *slot {
	for e := l.Back(); e != nil; e = e.Prev() {
		if s := e.Value.(*slot); s.lease <= now {
			return s
		}
	}
	return nil
}

// unpinEndedLocked moves the values whose soft pin ended by now to the back
// of lru, the first to be evicted; st.mu is held.
func (st *store) unpinEndedLocked(now int64) {
	if st.soft.Len() == 0 || now < st.softNext {
		return
	}
	next := int64(math.MaxInt64)
	for e := st.soft.Front(); e != nil; {
		s := e.Value.(*slot)
		e = e.Next()
		if s.pinUntil > now {
			next = min(next, s.pinUntil)
			continue
		}
		st.soft.Remove(s.elem)
		s.pin = pinNone
		s.elem = st.lru.PushBack(s)
	}
	st.softNext = next
}

// insertLocked puts s, a new slot, in the map (where its key has none);
// st.mu is held.
func (st *store) insertLocked(s *slot) {
	st.m[s.key] = s
	s.idx = len(st.all)
	st.all = append(st.all, s)
}

// replaceLocked puts s, a new slot, in old's place in the map: old leaves
// it without being unlinked (its LRU element and bytes are the caller's
// to settle); s keeps old's view generation. st.mu is held.
func (st *store) replaceLocked(old, s *slot) {
	st.m[s.key] = s
	s.idx = old.idx
	st.all[s.idx] = s
	s.vgen.Store(old.vgen.Load())
}

// unlink removes s from the map and its LRU list; st.mu is held.
func (st *store) unlink(s *slot) {
	delete(st.m, s.key)
	last := st.all[len(st.all)-1]
	st.all[s.idx], last.idx = last, s.idx
	st.all[len(st.all)-1] = nil
	st.all = st.all[:len(st.all)-1]
	if s.elem != nil {
		st.listOf(s).Remove(s.elem)
		s.elem = nil
	}
	if s.inMem {
		st.bytes -= uint64(s.n)
	} else {
		st.diskOnly--
	}
}

// place puts s, in the map, at the front of the LRU list its pin puts it
// in (none when hard-pinned); st.mu is held.
func (st *store) place(s *slot) {
	switch s.pin {
	case pinHard:
		s.elem = nil
	case pinSoft:
		if st.soft.Len() == 0 || s.pinUntil < st.softNext {
			st.softNext = s.pinUntil
		}
		s.elem = st.soft.PushFront(s)
	default:
		s.elem = st.lru.PushFront(s)
	}
}

// commit makes the first n bytes of b, filled by a PUT, the value of key
// with the pin and replica count of meta, and returns its version. The
// value it replaces is freed once no reader holds it; its read lease, if
// any, passes to the new value. With a disk tier, old is the value it
// replaced when that one has (or may get) a record on disk: the caller
// passes it to forget before it answers.
//
// A value that no reader holds is replaced in its slot, which keeps its key
// and moves to the front of its LRU list: an overwrite allocates nothing,
// so a server under PUTs makes no garbage.
func (st *store) commit(key []byte, b mem.Buffer, n int, meta putMeta) (ver uint64, old *slot) {
	st.mu.Lock()
	st.ver++
	ver = st.ver
	if old := st.m[string(key)]; old != nil && old.refs == 1 && old.inMem && old.disk == nil {
		oldBuf := old.buf
		st.bytes += uint64(n) - uint64(old.n)
		old.buf, old.n, old.ver, old.reps = b, n, ver, meta.reps
		old.vgen.Store(meta.vgen)
		if old.pin == meta.pin && meta.pin != pinSoft {
			if old.elem != nil {
				st.listOf(old).MoveToFront(old.elem)
			}
		} else {
			if old.elem != nil {
				st.listOf(old).Remove(old.elem)
			}
			old.pin, old.pinUntil = meta.pin, meta.pinUntil
			st.place(old)
		}
		st.mu.Unlock()
		st.pool.Free(oldBuf)
		return ver, nil
	}
	s := &slot{buf: b, n: n, ver: ver, key: string(key), refs: 1, pin: meta.pin, pinUntil: meta.pinUntil, reps: meta.reps, inMem: true}
	s.vgen.Store(meta.vgen)
	old = st.m[s.key]
	var freeOld bool
	if old != nil {
		s.lease = old.lease
		st.unlink(old)
		old.refs--
		freeOld = old.refs == 0 && old.inMem
	}
	st.m[s.key] = s
	s.idx = len(st.all)
	st.all = append(st.all, s)
	st.place(s)
	st.bytes += uint64(n)
	st.mu.Unlock()
	if freeOld {
		st.pool.Free(old.buf)
	}
	return ver, st.disk.debt(old)
}

// abort frees a block reserve returned, for a PUT that failed.
func (st *store) abort(b mem.Buffer) {
	st.aborted.Add(1)
	st.pool.Free(b)
}

// remove deletes key, unless a read lease holds it and not force. found is
// false when key was not there; left is how long its lease has left when
// that kept it. old is as commit's.
func (st *store) remove(key []byte, force bool) (found bool, left time.Duration, old *slot) {
	st.mu.Lock()
	s := st.m[string(key)]
	if s == nil {
		st.mu.Unlock()
		return false, 0, nil
	}
	if !force && s.lease != 0 {
		if now := st.now(); s.lease > now {
			st.mu.Unlock()
			return true, time.Duration(s.lease - now), nil
		}
	}
	st.unlink(s)
	s.refs--
	last := s.refs == 0 && s.inMem
	st.mu.Unlock()
	if last {
		st.pool.Free(s.buf)
	}
	return true, 0, st.disk.debt(s)
}

// counts returns the number of keys and the bytes of their values in
// memory.
func (st *store) counts() (keys int, bytes uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m), st.bytes
}

// scan is one slice of a scan of every value: it checks the values at
// st.all's indexes [hi-n, hi) from the top down, drops (leased or pinned)
// those keep rejects, and returns the hi of the next slice (0: done) and
// how many it dropped. A scan that starts at hi = len(st.all), or above,
// and goes on until 0 checks every value there was at its start, however
// the store changes between slices: a value appended since sits above the
// cursor, and the value that a removal moves down, from the top, into the
// removed one's place is either checked already or checked again.
func (st *store) scan(hi, n int, keep func(*slot) bool) (next, dropped int) {
	st.mu.Lock()
	var free []mem.Buffer
	hi = min(hi, len(st.all))
	lo := max(hi-n, 0)
	for i := hi - 1; i >= lo; i-- {
		s := st.all[i]
		if keep(s) {
			continue
		}
		dropped++
		st.unlink(s)
		s.refs--
		if s.refs == 0 && s.inMem {
			free = append(free, s.buf)
		}
	}
	st.mu.Unlock()
	for _, b := range free {
		st.pool.Free(b)
	}
	return lo, dropped
}

// clear drops every value, in memory and on disk (a clustered server that
// starts, or lost its place: the disk tier's records no longer count,
// now or after a restart).
func (st *store) clear() {
	st.dropAll()
	st.disk.reset()
}

// dropAll drops every value from the index, and frees their memory.
func (st *store) dropAll() {
	st.mu.Lock()
	var free []mem.Buffer
	for _, s := range st.m {
		if s.elem != nil {
			st.listOf(s).Remove(s.elem)
			s.elem = nil
		}
		s.refs--
		if s.refs == 0 && s.inMem {
			free = append(free, s.buf)
		}
	}
	clear(st.m)
	clear(st.all)
	st.all = st.all[:0]
	st.bytes = 0
	st.diskOnly = 0
	st.mu.Unlock()
	for _, b := range free {
		st.pool.Free(b)
	}
}
