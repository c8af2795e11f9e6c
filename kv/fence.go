package kv

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv/internal/placement"
)

// fence keeps a server of a cluster (one whose engine registered a node
// and that advertised its kv service) from answering with a value that a
// newer, acknowledged write may have replaced elsewhere. docs/KV.md,
// "Several servers", states the guarantee; in short:
//
//   - The server keeps its own view of the cluster: it lists the directory
//     every period. It serves only while that view is fresh (its latest
//     list started less than fresh ago) and its own lease is live (its
//     last renewal, plus two thirds of the TTL, is ahead).
//   - It answers a key only if it owns the key in its view (consistent
//     hashing, kv/internal/placement, as the clients place keys). A GET
//     of a key it does not own, or while it may not serve, is "not found" without looking; a PUT or
//     DELETE is refused with Aborted, and the cluster client looks again
//     and retries.
//   - When a server joins its view it drops the keys it no longer owns
//     (one that leaves takes no key from the others), and a PUT
//     commits only if the view did not change since it was admitted.
//   - When continuity breaks (no good list for longer than fresh: the
//     process was paused, the directory unreachable; or its entry was lost
//     and registered again), it drops every value, and takes writes again
//     only 2 × fresh after its next good list, by when every server that
//     serves has seen its entry (and dropped the keys it took over).
type fence struct {
	log    *slog.Logger
	st     *store // the server's values: dropped by key, or all
	dir    directory.Directory
	self   string
	ttl    time.Duration
	fresh  time.Duration
	period time.Duration

	mu        sync.RWMutex
	started   bool
	ring      *placement.Ring // the servers of the view
	selfIdx   int             // this server's index in ring, or -1
	gen       uint64          // bumped at each change of the view
	lastGood  time.Time       // the start of the latest good list
	leaseTill time.Time       // the lease is live until then, with margin
	readyAt   time.Time       // writes are taken from then on
	rereg     uint64

	breaks  atomic.Uint64 // continuity breaks: every value dropped
	dropped atomic.Uint64 // values dropped because their key moved
}

// Bounds of fence.fresh: half the TTL, at most maxFresh.
const maxFresh = 2 * time.Second

func newFence(log *slog.Logger, st *store, dir directory.Directory, self string, ttl time.Duration) *fence {
	fresh := min(ttl/2, maxFresh)
	return &fence{log: log, st: st, dir: dir, self: self, ttl: ttl, fresh: fresh, period: max(fresh/5, 10*time.Millisecond), selfIdx: -1}
}

// run refreshes the view until ctx ends.
func (f *fence) run(ctx context.Context) {
	t := time.NewTicker(f.period)
	defer t.Stop()
	for {
		f.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick lists the directory once and applies what it found.
func (f *fence) tick(ctx context.Context) {
	start := time.Now()
	var reg directory.Registration
	ok := false
	for _, r := range f.dir.Registrations() {
		if r.NodeID == f.self {
			reg, ok = r, true
		}
	}
	lctx, cancel := context.WithTimeout(ctx, f.fresh)
	ents, err := f.dir.List(lctx)
	cancel()
	end := time.Now()
	if err != nil || !ok || reg.State != directory.Registered {
		return // not a good list: the server fences itself once the last one is stale
	}
	var ids []string
	for _, e := range ents {
		if e.Services[ServiceName] != "" {
			ids = append(ids, e.NodeID)
		}
	}
	if !slices.Contains(ids, f.self) {
		return // its entry is not (or not yet again) in the directory
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started || start.Sub(f.lastGood) > f.fresh || reg.Reregistrations != f.rereg {
		if f.started {
			f.breaks.Add(1)
			f.log.Warn("kv: this server lost its place in the cluster for a while (paused, cut off from the directory, or its entry lost): dropping every value, and taking writes again after a delay",
				"node", f.self, "since", f.lastGood, "delay", 2*f.fresh)
		}
		f.st.clear()
		f.readyAt = end.Add(2 * f.fresh)
		f.rereg = reg.Reregistrations
		f.started = true
	}
	if f.ring == nil || !slices.Equal(ids, f.ring.IDs()) {
		prev := f.ring
		f.ring = placement.New(ids)
		f.selfIdx = f.ring.Index(f.self)
		f.gen++
		// A server loses keys only to a server that joined: when servers
		// only left, it keeps every value.
		n := 0
		if prev != nil && prev.Added(f.ring) {
			n = f.st.retain(func(key string, reps int) bool { return f.holdsLocked([]byte(key), reps) })
		}
		f.dropped.Add(uint64(n))
		f.log.Debug("kv: the cluster changed", "node", f.self, "servers", ids, "dropped", n)
	}
	f.lastGood = start
	f.leaseTill = reg.Renewed.Add(f.ttl * 2 / 3)
}

// ownsLocked reports whether this server owns key in its view.
func (f *fence) ownsLocked(key []byte) bool { return f.holdsLocked(key, 1) }

// holdsLocked reports whether this server is one of the first reps of
// key's servers in its view, in placement order (as a Cluster places
// replicas).
func (f *fence) holdsLocked(key []byte, reps int) bool {
	return f.ring != nil && f.ring.Holds(placement.KeyBytes(key), f.selfIdx, reps)
}

// servingLocked reports whether the view is fresh and the lease live.
func (f *fence) servingLocked(now time.Time) bool {
	return f.started && now.Sub(f.lastGood) <= f.fresh && now.Before(f.leaseTill)
}

// acquire acquires key's slot in st for a GET, if this server may answer
// it: where it serves, and holds key (as its owner, or as one of the first
// servers of a value stored with replicas). nil: not found, or not this
// server's to answer. The check and the lookup happen under one read lock
// of the view, so that a continuity break (which drops every value under
// the write lock) cannot fall between them: looking up first and checking
// after would answer, from a slot taken before the break, a value that a
// newer write replaced elsewhere while this server was away.
func (f *fence) acquire(st *store, key []byte) *slot {
	if f == nil {
		return st.acquire(key)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.servingLocked(time.Now()) {
		return nil
	}
	sl := st.acquire(key)
	if sl != nil && !f.holdsLocked(key, int(sl.reps)) {
		st.release(sl)
		return nil
	}
	return sl
}

// admit admits a PUT or DELETE of key, stored with reps replicas, and
// returns the view's generation for commit; the error is what to answer
// instead.
func (f *fence) admit(key []byte, reps int) (uint64, error) {
	if f == nil {
		return 0, nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.gen, f.checkLocked(key, reps)
}

func (f *fence) checkLocked(key []byte, reps int) error {
	now := time.Now()
	switch {
	case !f.servingLocked(now):
		return status.Errorf(codes.Aborted, "server %s is not serving: it lost touch with the directory, or its lease; try again", f.self)
	case now.Before(f.readyAt):
		return status.Errorf(codes.Aborted, "server %s (re)joined the cluster and takes writes in %v; try again", f.self, f.readyAt.Sub(now).Round(time.Millisecond))
	case reps <= 1 && !f.ownsLocked(key):
		return status.Errorf(codes.Aborted, "server %s does not own key %q in the cluster's current placement; look again", f.self, string(key))
	case !f.holdsLocked(key, reps):
		return status.Errorf(codes.Aborted, "server %s is not one of the %d servers of key %q in the cluster's current placement; look again", f.self, reps, string(key))
	}
	return nil
}

// hold lets key's write commit if it may still happen: the view is the
// one admit saw (generation gen), and the server still serves. On nil, the
// caller commits and then calls release; the view cannot change between
// the two. (Not a closure: the inline PUT's path allocates nothing more.)
func (f *fence) hold(key []byte, gen uint64, reps int) error {
	if f == nil {
		return nil
	}
	f.mu.RLock()
	if f.gen != gen {
		f.mu.RUnlock()
		return status.Errorf(codes.Aborted, "the cluster changed during the write of key %q; try again", string(key))
	}
	if err := f.checkLocked(key, reps); err != nil {
		f.mu.RUnlock()
		return err
	}
	return nil
}

// release ends what hold began.
func (f *fence) release() {
	if f != nil {
		f.mu.RUnlock()
	}
}
