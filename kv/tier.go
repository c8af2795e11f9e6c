package kv

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/kv/disktier"
)

// The disk tier (ServerOptions.DiskDir; docs/KV.md, "The disk tier").
//
// What memory evicts goes to disk instead of nowhere. Eviction takes a
// value out of the LRU lists and queues its write (write-behind: a bounded
// queue, written by DiskInFlight goroutines); until written it stays the
// key's value in memory and GETs read it there. Once written, the key's
// slot is replaced by one that holds only the record's place, and the
// memory is freed with the last reader. A PUT that needs room waits for
// the writes queued, rather than evicting more.
//
// A GET of a value only on disk reserves a block in the pool (evicting as
// a PUT does), reads the record into it with its checks, and the value is
// in memory again (a promotion), at the front of the LRU, with its record
// kept: evicting it again, unchanged, frees the memory without a write.
// The ring of records overwrites its oldest when full, and the values it
// held are gone (unless in memory too). LRU order thus spans both tiers.
//
// Overwrites and DELETEs: a value replaced while it has a record (or a
// write queued) leaves a tombstone on disk before the PUT or DELETE is
// answered, so that a restart never brings the older value back.
//
// Restarts: the tier's records are read back at start-up. A server in a
// cluster resets the tier when its fence drops every value (when it
// starts, and when it lost its place): a value on this server's disk may
// have been overwritten elsewhere meanwhile.

// defaultDiskQueue is how many values may wait for their write-behind.
const defaultDiskQueue = 32

// diskTier is the store's side of the disk tier.
type diskTier struct {
	t   *disktier.Tier
	log *slog.Logger
	wq  chan *slot
	wg  sync.WaitGroup
	cap int

	// guarded by store.mu
	queued  int           // demotions queued or in flight
	pending uint64        // the bytes of their blocks
	wrote   chan struct{} // closed (and replaced) when a demotion ends
	closed  bool

	hits, promotions, demotions, diskEvicted        atomic.Uint64
	droppedTooLarge, droppedWriteError, droppedRead atomic.Uint64
	tombstones, tombstoneErrors, restored, flushed  atomic.Uint64
	readMisses                                      atomic.Uint64
}

// openDiskTier opens the tier of o for st and loads what it holds.
func openDiskTier(st *store, dir string, size int64, inFlight int, log *slog.Logger) error {
	if inFlight <= 0 {
		inFlight = disktier.DefaultInFlight
	}
	d := &diskTier{log: log, cap: defaultDiskQueue, wrote: make(chan struct{})}
	t, ents, err := disktier.Open(disktier.Options{Dir: dir, Size: size, InFlight: inFlight, Logger: log,
		OnEvict: func(key string, seq uint64) { d.evicted(st, key, seq) }})
	if err != nil {
		return err
	}
	d.t = t
	d.wq = make(chan *slot, d.cap)
	st.mu.Lock()
	for _, e := range ents {
		loc := e.Loc
		st.insertLocked(&slot{key: e.Key, n: int(loc.N), ver: e.Ver, reps: max(e.Reps, 1), refs: 1, disk: &loc})
		st.ver = max(st.ver, e.Ver)
		st.diskOnly++
	}
	st.disk = d
	st.mu.Unlock()
	d.restored.Add(uint64(len(ents)))
	for range inFlight {
		d.wg.Go(func() {
			for s := range d.wq {
				d.demote(st, s)
			}
		})
	}
	if len(ents) > 0 {
		log.Info("kv: disk tier: values found", "path", t.Path(), "values", len(ents))
	}
	return nil
}

// pendingAtLeast reports whether the demotions queued will free at least n
// bytes.
func (d *diskTier) pendingAtLeast(st *store, n uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return d.queued > 0 && d.pending >= n
}

func (d *diskTier) pendingBytes(st *store) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return d.pending
}

// waitWrite waits for the next demotion to end, or returns at once when
// none is queued.
func (d *diskTier) waitWrite(ctx context.Context, st *store) error {
	st.mu.Lock()
	if d.queued == 0 {
		st.mu.Unlock()
		return nil
	}
	ch := d.wrote
	st.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// demoteLocked moves s, the value eviction chose, towards the disk: at
// once when it has a record already, else by queueing its write. st.mu is
// held, and demoteLocked unlocks it.
func (d *diskTier) demoteLocked(st *store, s *slot) evictResult {
	if s.disk == nil && (d.queued >= d.cap || d.closed) {
		st.mu.Unlock()
		return queueFull
	}
	st.listOf(s).Remove(s.elem)
	s.elem = nil
	st.evictions.Add(1)
	if s.disk != nil { // unchanged since it was read from disk
		st.replaceLocked(s, &slot{key: s.key, n: s.n, ver: s.ver, reps: s.reps, refs: 1, disk: s.disk})
		st.diskOnly++
		st.bytes -= uint64(s.n)
		s.refs--
		last := s.refs == 0
		st.mu.Unlock()
		if last {
			st.pool.Free(s.buf)
		}
		return evictedOne
	}
	s.demoting, s.touched = true, false
	s.refs++ // the write's
	s.written = make(chan struct{})
	d.queued++
	d.pending += uint64(s.buf.Len())
	st.mu.Unlock()
	d.wq <- s // room was counted
	return evictedOne
}

// demote writes s to disk and, if it is still the key's value and no GET
// wanted it meanwhile, replaces it with its record.
func (d *diskTier) demote(st *store, s *slot) {
	loc, err := d.t.Write([]byte(s.key), s.ver, s.reps, s.value())
	now := st.now()
	st.mu.Lock()
	s.demoting = false
	d.queued--
	d.pending -= uint64(s.buf.Len())
	if err == nil {
		s.disk = &loc
		d.demotions.Add(1)
	}
	switch {
	case st.m[s.key] != s:
		// Overwritten or deleted meanwhile: forget writes the tombstone.
	case err != nil:
		// No room on disk, or it failed: the value is dropped, as it would
		// be without a disk tier.
		st.unlink(s)
		s.refs--
	case s.touched || s.lease > now:
		st.place(s) // read meanwhile: it stays, and its record saves a write
	default:
		st.replaceLocked(s, &slot{key: s.key, n: s.n, ver: s.ver, reps: s.reps, refs: 1, disk: s.disk, lease: s.lease})
		st.diskOnly++
		st.bytes -= uint64(s.n)
		s.refs--
	}
	s.refs--
	last := s.refs == 0
	w := s.written
	s.written = nil
	close(d.wrote)
	d.wrote = make(chan struct{})
	st.mu.Unlock()
	close(w)
	if last {
		st.pool.Free(s.buf)
	}
	if err != nil {
		if errors.Is(err, disktier.ErrTooLarge) {
			d.droppedTooLarge.Add(1)
		} else if !errors.Is(err, disktier.ErrClosed) {
			d.droppedWriteError.Add(1)
			d.log.Warn("kv: disk tier: a value could not be written, and was dropped", "key", s.key, "err", err)
		}
	}
}

// errNotOnDisk: the value's record is gone (the ring overwrote it).
var errNotOnDisk = errors.New("the value's record is gone from the disk tier")

// load brings s, a value only on disk that a GET holds, into memory; a
// GET that finds it loading waits. The record is checked as it is read: a
// corrupt one, or a read that fails, is dropped, and the GET misses.
func (d *diskTier) load(ctx context.Context, st *store, s *slot) error {
	st.mu.Lock()
	for !s.inMem {
		if ch := s.loading; ch != nil {
			st.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			st.mu.Lock()
			continue
		}
		if s.disk == nil {
			st.mu.Unlock()
			d.readMisses.Add(1)
			return errNotOnDisk
		}
		loc := *s.disk
		ch := make(chan struct{})
		s.loading = ch
		st.mu.Unlock()
		b, _, err := st.reserve(ctx, int(loc.N))
		readErr := false
		if err == nil {
			if err = d.t.Read(loc, []byte(s.key), b.Bytes()[:loc.N]); err != nil {
				st.pool.Free(b)
				readErr = true
			}
		}
		st.mu.Lock()
		s.loading = nil
		close(ch)
		if err != nil {
			if readErr {
				if s.disk != nil && s.disk.Seq == loc.Seq {
					s.disk = nil
				}
				if st.m[s.key] == s && !s.inMem {
					st.unlink(s)
					s.refs--
				}
			}
			st.mu.Unlock()
			if readErr {
				d.droppedRead.Add(1)
				d.log.Warn("kv: disk tier: a value could not be read back, and was dropped (the GET misses)", "key", s.key, "err", err)
			}
			return err
		}
		s.buf, s.inMem = b, true
		if st.m[s.key] == s {
			st.diskOnly--
			st.bytes += uint64(s.n)
			st.place(s)
		}
		d.promotions.Add(1)
	}
	st.mu.Unlock()
	return nil
}

// evicted is the ring's report that the record seq of key was
// overwritten: a value that was only there is gone.
func (d *diskTier) evicted(st *store, key string, seq uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[key]
	if s == nil || s.disk == nil || s.disk.Seq != seq {
		return
	}
	s.disk = nil
	if !s.inMem && s.loading == nil {
		st.unlink(s)
		s.refs--
		d.diskEvicted.Add(1)
	}
}

// debt is old, the value an overwrite or DELETE replaced, when there is a
// disk tier: forget settles it. Nil-safe.
func (d *diskTier) debt(old *slot) *slot {
	if d == nil {
		return nil
	}
	return old
}

// forget makes sure that old, key's value before an overwrite or DELETE,
// does not come back from disk after a restart: it waits for its
// write-behind, if one is under way, and writes a tombstone if it has a
// record. A tombstone that cannot be written resets the tier (every value
// only on disk is dropped) rather than risk a stale value.
// The key is old's (not the request's, which must not escape: the
// inline PUT's request lives on the stack).
func (d *diskTier) forget(st *store, old *slot) {
	if d == nil || old == nil {
		return
	}
	st.mu.Lock()
	w := old.written
	st.mu.Unlock()
	if w != nil {
		<-w
	}
	st.mu.Lock()
	has := old.disk != nil
	st.mu.Unlock()
	if !has {
		return
	}
	key := old.key
	if err := d.t.Tombstone([]byte(key)); err != nil {
		if errors.Is(err, disktier.ErrClosed) {
			return
		}
		d.tombstoneErrors.Add(1)
		d.log.Warn("kv: disk tier: a tombstone could not be written: resetting the tier", "key", key, "err", err)
		d.resetKeep(st)
		return
	}
	d.tombstones.Add(1)
}

// resetKeep resets the tier and drops the values only on disk; those in
// memory stay. Nil-safe.
func (d *diskTier) resetKeep(st *store) {
	if d == nil {
		return
	}
	st.mu.Lock()
	for _, s := range st.m {
		if !s.inMem && s.loading == nil {
			st.unlink(s)
			s.refs--
		}
		s.disk = nil
	}
	st.mu.Unlock()
	d.reset()
}

// reset resets the tier's file: no record before it counts. Nil-safe.
func (d *diskTier) reset() {
	if d == nil {
		return
	}
	if err := d.t.Reset(); err != nil && !errors.Is(err, disktier.ErrClosed) {
		d.log.Error("kv: disk tier: reset", "err", err)
	}
}

// close writes every value that is only in memory to disk (a server that
// stops keeps its values), waits for the writes queued, and closes the
// file. The pool must still be mapped.
func (d *diskTier) close(st *store) {
	if d == nil {
		return
	}
	st.mu.Lock()
	d.closed = true
	for d.queued > 0 {
		ch := d.wrote
		st.mu.Unlock()
		<-ch
		st.mu.Lock()
	}
	var todo []*slot
	for _, s := range st.m {
		if s.inMem && s.disk == nil && !s.demoting {
			s.refs++
			todo = append(todo, s)
		}
	}
	st.mu.Unlock()
	close(d.wq)
	d.wg.Wait()
	work := make(chan *slot)
	var wg sync.WaitGroup
	var failed atomic.Uint64
	for range disktier.DefaultInFlight {
		wg.Go(func() {
			for s := range work {
				if _, err := d.t.Write([]byte(s.key), s.ver, s.reps, s.value()); err != nil {
					failed.Add(1)
				} else {
					d.flushed.Add(1)
				}
			}
		})
	}
	for _, s := range todo {
		work <- s
	}
	close(work)
	wg.Wait()
	st.mu.Lock()
	var free []*slot
	for _, s := range todo {
		s.refs--
		if s.refs == 0 {
			free = append(free, s)
		}
	}
	st.mu.Unlock()
	for _, s := range free {
		st.pool.Free(s.buf)
	}
	if n := failed.Load(); n > 0 {
		d.log.Warn("kv: disk tier: values not written at close", "values", n)
	}
	if err := d.t.Close(); err != nil {
		d.log.Warn("kv: disk tier: close", "err", err)
	}
}

// stats returns the disk tier's counters; nil without one.
func (d *diskTier) stats(st *store) *DiskStats {
	if d == nil {
		return nil
	}
	ts := d.t.Stats()
	s := &DiskStats{Capacity: uint64(ts.Capacity), Used: uint64(ts.Used),
		Hits: d.hits.Load(), Promotions: d.promotions.Load(), Demotions: d.demotions.Load(), Evictions: d.diskEvicted.Load(),
		WriteErrors: ts.WriteErrors, ReadErrors: ts.ReadErrors, Corrupt: ts.Corrupt,
		DroppedTooLarge: d.droppedTooLarge.Load(), DroppedWriteError: d.droppedWriteError.Load(), DroppedRead: d.droppedRead.Load()}
	st.mu.Lock()
	s.Keys, s.Queue = uint64(st.diskOnly), uint64(d.queued)
	st.mu.Unlock()
	return s
}

// abandon stops the tier without writing anything (a server that failed
// to start). Nil-safe.
func (d *diskTier) abandon() {
	if d == nil {
		return
	}
	close(d.wq)
	d.wg.Wait()
	d.t.Close()
}
