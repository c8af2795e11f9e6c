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
//   - The server keeps its own view of the cluster. On etcd it lists the
//     directory once and follows its watch, and every period it syncs:
//     etcd's answer says the watch has reported every change made before
//     the sync was sent. On a coordinator it lists the directory every
//     period. Either confirms the view as of when it was sent. It serves
//     only while that view is fresh (confirmed as of less than fresh ago)
//     and its own lease is live (its last renewal, plus two thirds of the
//     TTL, is ahead).
//   - It answers a key only if it owns the key in its view (consistent
//     hashing, kv/internal/placement, as the clients place keys). A GET
//     of a key it does not own, or while it may not serve, is "not found"
//     without looking; a PUT or
//     DELETE is refused with Aborted, and the cluster client looks again
//     and retries.
//   - When a server joins its view it stops answering the keys it no
//     longer owns at once, and a rescan drops them, in slices, outside
//     the data path's locks (one that leaves takes no key from the
//     others). A PUT commits only if the view did not change since it
//     was admitted.
//   - When continuity breaks (no confirmation for longer than fresh: the
//     process was paused, the directory unreachable; its entry was lost
//     and registered again; or the watch could not resume where it
//     broke), it drops every value, and takes writes again only 2 × fresh
//     after its next confirmation, by when every server that serves has
//     seen its entry (and dropped the keys it took over).
type fence struct {
	log    *slog.Logger
	st     *store // the server's values: dropped by key, or all
	dir    directory.Directory
	self   string
	ttl    time.Duration
	fresh  time.Duration
	period time.Duration

	mu      sync.RWMutex
	started bool
	ring    *placement.Ring // the servers of the view
	selfIdx int             // this server's index in ring, or -1
	// joins are the views, since the oldest slot.vgen of the store, in
	// which a server joined: in each, this server may have lost keys. A
	// value is answered only if its server held its key in every one of
	// them newer than the value's vgen; the rescan (kicked by each)
	// drops the values that fail, moves the others' vgen on, and then
	// forgets the views it covered.
	joins     []joinView
	rescan    chan struct{} // kicks the rescan: capacity 1
	gen       uint64        // bumped at each change of the view
	lastGood  time.Time     // the view is confirmed as of then
	leaseTill time.Time     // the lease is live until then, with margin
	readyAt   time.Time     // writes are taken from then on
	rereg     uint64

	breaks  atomic.Uint64 // continuity breaks: every value dropped
	dropped atomic.Uint64 // values dropped because their key moved
}

// applyLocked makes ids (the servers listed, sorted) the fence's view, if
// they changed; f.mu is held.
func (f *fence) applyLocked(ids []string) {
	if f.ring != nil && slices.Equal(ids, f.ring.IDs()) {
		return
	}
	prev := f.ring
	f.ring = placement.New(ids)
	f.selfIdx = f.ring.Index(f.self)
	f.gen++
	// A server loses keys only to a server that joined: when servers
	// only left, it keeps every value. When one joined, the values
	// whose keys it took stop being answered now (acquire checks the
	// joins), and the rescan drops them, outside the locks of the data
	// path.
	if prev != nil && prev.Added(f.ring) {
		f.joins = append(f.joins, joinView{gen: f.gen, ring: f.ring, self: f.selfIdx})
		if len(f.joins) > maxJoins {
			g := f.gen
			_, n := f.st.scan(int(^uint(0)>>1), int(^uint(0)>>1), func(s *slot) bool { return f.validLocked(s, g) })
			f.dropped.Add(uint64(n))
			f.joins = f.joins[:0]
		}
		select {
		case f.rescan <- struct{}{}:
		default:
		}
	}
	f.log.Debug("kv: the cluster changed", "node", f.self, "servers", ids, "joined", prev != nil && prev.Added(f.ring))
}

// joinView is a view of the cluster in which a server joined.
type joinView struct {
	gen  uint64
	ring *placement.Ring
	self int // this server's index in ring
}

// maxJoins bounds fence.joins: past it (servers join faster than the
// rescan goes through the store), the fence drops what it lost at once,
// under its lock, and starts afresh.
const maxJoins = 16

// rescanSlice is how many values one slice of the rescan checks under the
// store's lock: about 50 µs of work.
const rescanSlice = 1024

// Bounds of fence.fresh: half the TTL, at most maxFresh.
const maxFresh = 2 * time.Second

func newFence(log *slog.Logger, st *store, dir directory.Directory, self string, ttl time.Duration) *fence {
	fresh := min(ttl/2, maxFresh)
	period := fresh / 5 // a list
	if _, ok := dir.(directory.Follower); ok {
		period = fresh / 4 // a sync
	}
	return &fence{log: log, st: st, dir: dir, self: self, ttl: ttl, fresh: fresh, period: max(period, 10*time.Millisecond), selfIdx: -1, rescan: make(chan struct{}, 1)}
}

// run refreshes the view until ctx ends: from a Follow of the directory
// where it has one (etcd), else by listing it every period.
func (f *fence) run(ctx context.Context) {
	go f.rescanLoop(ctx)
	if fl, ok := f.dir.(directory.Follower); ok {
		f.followLoop(ctx, fl)
		return
	}
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
	lctx, cancel := context.WithTimeout(ctx, f.fresh)
	ents, err := f.dir.List(lctx)
	cancel()
	if err != nil {
		return // not a good list: the server fences itself once the last one is stale
	}
	members := map[string]bool{}
	for _, e := range ents {
		if e.Services[ServiceName] != "" {
			members[e.NodeID] = true
		}
	}
	f.confirm(start, members, false)
}

// followLoop follows the directory until ctx ends: it applies each change
// as it comes, and syncs every period; each answer confirms the view as of
// when its sync was sent, as a list would, for one small message instead
// of a list of every node.
func (f *fence) followLoop(ctx context.Context, fl directory.Follower) {
	for n := 0; ctx.Err() == nil; n++ {
		ch, sync, err := fl.Follow(ctx)
		if err != nil {
			f.log.Debug("kv: fence: follow the directory", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(min(f.period<<min(n, 4), f.fresh)):
			}
			continue
		}
		n = 0
		f.follow(ch, sync)
	}
}

// follow applies one Follow's events until its channel closes.
func (f *fence) follow(ch <-chan directory.Event, sync func() error) {
	members := map[string]bool{}
	// reset: what the fence saw before may not lead to what it sees now
	// (a new Follow, or one that lost continuity), so the next
	// confirmation breaks continuity.
	reset := true
	t := time.NewTicker(f.period)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			switch ev.Kind {
			case directory.Join:
				if ev.Entry.Services[ServiceName] != "" {
					members[ev.Entry.NodeID] = true
				} else {
					delete(members, ev.Entry.NodeID)
				}
			case directory.Leave:
				delete(members, ev.Entry.NodeID)
			case directory.Reset:
				reset = true
			case directory.Synced:
				if f.confirm(ev.At, members, reset) {
					reset = false
				}
				continue
			}
			if !reset && len(ch) == 0 {
				// Between confirmations too: a server that joined stops
				// this one answering the keys it took at once.
				f.view(members)
			}
		case <-t.C:
			if err := sync(); err != nil {
				f.log.Debug("kv: fence: sync", "err", err)
			}
		}
	}
}

// sortedIDs returns the keys of members, sorted.
func sortedIDs(members map[string]bool) []string {
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// view makes members the view, if the fence has one.
func (f *fence) view(members map[string]bool) {
	ids := sortedIDs(members)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		f.applyLocked(ids)
	}
}

// confirm makes members (the kv servers listed) the view as of at: every
// change to the directory committed before at is in it. reset: the view
// may not follow on from the last one. It reports whether the view was
// good: this server registered, and among members.
func (f *fence) confirm(at time.Time, members map[string]bool, reset bool) bool {
	var reg directory.Registration
	ok := false
	for _, r := range f.dir.Registrations() {
		if r.NodeID == f.self {
			reg, ok = r, true
		}
	}
	if !ok || reg.State != directory.Registered || !members[f.self] {
		return false // not a good view: the server fences itself once the last one is stale
	}
	ids := sortedIDs(members)
	end := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started || reset || at.Sub(f.lastGood) > f.fresh || reg.Reregistrations != f.rereg {
		if f.started {
			f.breaks.Add(1)
			f.log.Warn("kv: this server lost its place in the cluster for a while (paused, cut off from the directory, or its entry lost): dropping every value, and taking writes again after a delay",
				"node", f.self, "since", f.lastGood, "delay", 2*f.fresh)
		}
		f.st.clear()
		f.joins = nil
		f.readyAt = end.Add(2 * f.fresh)
		if !f.started && reg.TookOver {
			// A restart that took its ID over from its previous run while
			// that entry was live: the ID never left the directory, so no
			// other server took its keys, and none can be answering them.
			f.readyAt = end
		}
		f.rereg = reg.Reregistrations
		f.started = true
	}
	f.applyLocked(ids)
	if at.After(f.lastGood) {
		f.lastGood = at
	}
	f.leaseTill = reg.Renewed.Add(f.ttl * 2 / 3)
	return true
}

// ownsLocked reports whether this server owns key in its view.
func (f *fence) ownsLocked(key []byte) bool { return f.holdsLocked(key, 1) }

// validLocked reports whether the server held s's key in every view in
// which a server joined after s.vgen, up to generation g (the current
// one, or a rescan's). f.mu is held (read or write).
func (f *fence) validLocked(s *slot, g uint64) bool {
	v := s.vgen.Load()
	if v >= g || len(f.joins) == 0 { // the usual case: no hash
		return true
	}
	h := placement.Key(s.key)
	for _, j := range f.joins {
		if j.gen > v && j.gen <= g && !j.ring.Holds(h, j.self, int(max(s.reps, 1))) {
			return false
		}
	}
	return true
}

// rescanLoop runs a rescan at each kick until ctx ends.
func (f *fence) rescanLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.rescan:
		}
		f.rescanOnce(ctx)
	}
}

// rescanOnce goes through the store in slices of rescanSlice values, each
// under the store's lock and the fence's read lock: it drops the values
// whose keys the server lost to a server that joined, and moves the
// others' vgen on to the generation it started at, g. Having seen every
// value, it forgets the joins up to g: no value is older than g any more.
func (f *fence) rescanOnce(ctx context.Context) {
	f.mu.RLock()
	g, pending := f.gen, len(f.joins)
	f.mu.RUnlock()
	if pending == 0 {
		return
	}
	keep := func(s *slot) bool {
		if !f.validLocked(s, g) {
			return false
		}
		if s.vgen.Load() < g {
			s.vgen.Store(g)
		}
		return true
	}
	dropped := 0
	for hi := int(^uint(0) >> 1); hi > 0; {
		if ctx.Err() != nil {
			return
		}
		f.mu.RLock()
		if len(f.joins) == 0 { // a break cleared the store, or the fence did the work
			f.mu.RUnlock()
			return
		}
		var n int
		hi, n = f.st.scan(hi, rescanSlice, keep)
		f.mu.RUnlock()
		dropped += n
	}
	f.dropped.Add(uint64(dropped))
	f.mu.Lock()
	f.joins = slices.DeleteFunc(f.joins, func(j joinView) bool { return j.gen <= g })
	f.mu.Unlock()
}

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

// acquire acquires key's slot in st for a GET, and reports whether its
// value is in memory (store.acquire), if this server may answer it: where it serves, and holds key (as its owner, or as one of the first
// servers of a value stored with replicas). nil: not found, or not this
// server's to answer. The check and the lookup happen under one read lock
// of the view, so that a continuity break (which drops every value under
// the write lock) cannot fall between them: looking up first and checking
// after would answer, from a slot taken before the break, a value that a
// newer write replaced elsewhere while this server was away.
func (f *fence) acquire(st *store, key []byte) (_ *slot, inMem bool) {
	if f == nil {
		return st.acquire(key)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.servingLocked(time.Now()) {
		return nil, false
	}
	sl, inMem := st.acquire(key)
	if sl != nil && (!f.holdsLocked(key, int(sl.reps)) || !f.validLocked(sl, f.gen)) {
		st.release(sl)
		return nil, false
	}
	return sl, inMem
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
