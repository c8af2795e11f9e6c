package directory

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Watch lists the prefix once, then follows etcd's watch from the list's
// revision, so that no change is missed between the two (see follower).
func (d *etcdDir) Watch(ctx context.Context) (<-chan Event, error) {
	ch, _, err := d.follow(ctx, false)
	return ch, err
}

// Follow is Watch with Synced and Reset events and a sync (see Follower).
func (d *etcdDir) Follow(ctx context.Context) (<-chan Event, func() error, error) {
	return d.follow(ctx, true)
}

func (d *etcdDir) follow(ctx context.Context, sync bool) (<-chan Event, func() error, error) {
	start := time.Now()
	first, rev, err := d.list(ctx)
	if err != nil {
		return nil, nil, err
	}
	fw := &follower{d: d, synced: sync, seen: map[string]int64{}, rev: rev, stall: make(chan struct{}, 1)}
	ch, err := d.watch(func(ch chan<- Event) { fw.run(ctx, ch, first, start) })
	if err != nil {
		return nil, nil, err
	}
	return ch, fw.sync, nil
}

// follower is one Watch or Follow of an etcd directory. It follows etcd's
// watch of the prefix, each time on a gRPC stream of its own, so that a
// progress request (sync) reaches its watch and no other. When the watch
// breaks it resumes from the last revision it reported, on a new stream:
// nothing is listed again unless etcd compacted that revision away. Then
// it lists again and reports the difference from what it reported so far
// (a leave for each entry gone meanwhile, a join for each new or changed
// one), so that an entry that went while the watch was down is never left
// behind.
//
// A sync is etcd's progress request: etcd answers it on the stream, after
// every event it sent before, once the watch has caught up (never before,
// and not at all while the watch lags behind the store). The answers do
// not say which request they answer, and they come in order; so each is
// taken to answer the oldest request that has none yet. That is never
// later than the request it answers: a Synced never claims more than
// etcd said. Two requests at most are unanswered; when the older is a
// second old, the stream is replaced (its late answers cannot reach the
// next one) and the requests are forgotten.
type follower struct {
	d      *etcdDir
	synced bool             // report Synced and Reset (Follow), or not (Watch)
	seen   map[string]int64 // the revision that last modified each entry reported as there
	rev    int64            // resume from here: every change before it was reported

	mu      sync.Mutex
	sctx    context.Context // the current stream's context; nil between streams
	pending []time.Time     // when each unanswered sync of the stream was sent, oldest first
	stall   chan struct{}   // asks run for a new stream: capacity 1
}

// Errors of a follower's stream.
var (
	errCompacted = errors.New("the etcd watch's revision was compacted")
	errStalled   = errors.New("etcd did not answer a progress request within " + syncStall.String())
	errNoStream  = errors.New("directory: the watch is between streams")
	errSyncBusy  = errors.New("directory: two syncs are already waiting for an answer")
)

// syncStall is how long the older of two unanswered syncs waits before
// the stream is replaced.
const syncStall = time.Second

// streams numbers the followers' streams: each gets gRPC metadata of its
// own, which is how clientv3 tells streams apart.
var streams atomic.Uint64

// run reports first (the list that began at start), then follows the
// watch until ctx ends or the directory closes.
func (fw *follower) run(ctx context.Context, ch chan<- Event, first []listed, start time.Time) {
	d := fw.d
	if !d.report(ctx, ch, fw.seen, first) || !fw.sent(ctx, ch, start) {
		return
	}
	for n := 0; ; n++ {
		err := fw.stream(ctx, ch)
		if err == nil || ctx.Err() != nil || d.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errStalled) {
			d.o.Logger.Debug("directory: etcd watch: a progress request went unanswered; resuming on a new stream", "revision", fw.rev)
			n = 0
			continue // no pause: the old stream is gone, nothing was lost
		}
		if !errors.Is(err, errCompacted) {
			d.o.Logger.Warn("directory: etcd watch ended; resuming", "revision", fw.rev, "err", err)
			if !sleep(ctx, d.ctx, backoff(n, 2*time.Second)) {
				return
			}
			continue
		}
		d.o.Logger.Warn("directory: etcd compacted the watch's revision; listing again", "revision", fw.rev)
		for m := 0; ; m++ {
			start := time.Now()
			now, rev, err := d.list(ctx)
			if err == nil {
				if fw.synced && !send(ctx, d.ctx, ch, Event{Kind: Reset}) {
					return
				}
				if !d.report(ctx, ch, fw.seen, now) || !fw.sent(ctx, ch, start) {
					return
				}
				fw.rev = rev
				break
			}
			d.o.Logger.Debug("directory: watch: list failed", "err", err)
			if !sleep(ctx, d.ctx, backoff(m, 2*time.Second)) {
				return
			}
		}
	}
}

// sent reports Synced at at, for a Follow.
func (fw *follower) sent(ctx context.Context, ch chan<- Event, at time.Time) bool {
	return !fw.synced || send(ctx, fw.d.ctx, ch, Event{Kind: Synced, At: at})
}

// sleep waits for d, or until either context ends (false).
func sleep(ctx, dctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-dctx.Done():
	}
	return false
}

// stream follows etcd's watch from fw.rev on a new gRPC stream, and
// reports its events. It returns nil when ctx or the directory ended, or
// why the watch ended under it.
func (fw *follower) stream(ctx context.Context, ch chan<- Event) error {
	d := fw.d
	md := metadata.AppendToOutgoingContext(ctx, "xfer-watch", strconv.FormatUint(streams.Add(1), 10))
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(md))
	fw.mu.Lock()
	fw.sctx, fw.pending = sctx, nil
	fw.mu.Unlock()
	defer func() {
		fw.mu.Lock()
		fw.sctx, fw.pending = nil, nil
		fw.mu.Unlock()
		cancel()
	}()
	select {
	case <-fw.stall: // a request of the last stream
	default:
	}
	// From fw.rev itself, not the one after: etcd answers no progress
	// request of a watch that starts beyond its store's revision, and the
	// events at fw.rev were reported already (seen tells them apart).
	wch := d.cli.Watch(sctx, d.prefix, clientv3.WithPrefix(), clientv3.WithRev(fw.rev))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-fw.stall:
			return errStalled
		case <-d.ctx.Done():
			return nil
		}
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return errors.New("the etcd watch channel closed")
		}
		if resp.CompactRevision != 0 {
			return errCompacted
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.IsProgressNotify() {
			fw.rev = max(fw.rev, resp.Header.Revision)
			if at, ok := fw.answered(); ok && !fw.sent(ctx, ch, at) {
				return nil
			}
			continue
		}
		for _, ev := range resp.Events {
			fw.rev = max(fw.rev, ev.Kv.ModRevision)
			out, ok := fw.event(ev)
			if ok && !send(ctx, d.ctx, ch, out) {
				return nil
			}
		}
	}
}

// event turns an etcd event into the Event to report, keeping fw.seen;
// false when there is none to report (a malformed entry, or one reported
// already).
func (fw *follower) event(ev *clientv3.Event) (Event, bool) {
	d := fw.d
	switch ev.Type {
	case clientv3.EventTypePut:
		e, err := d.decode(ev.Kv.Key, ev.Kv.Value)
		if err != nil {
			d.o.Logger.Warn("directory: skipping a malformed entry", "key", string(ev.Kv.Key), "err", err)
			return Event{}, false
		}
		if fw.seen[e.NodeID] >= ev.Kv.ModRevision {
			return Event{}, false
		}
		fw.seen[e.NodeID] = ev.Kv.ModRevision
		return Event{Kind: Join, Entry: e}, true
	case clientv3.EventTypeDelete:
		id := strings.TrimPrefix(string(ev.Kv.Key), d.prefix)
		if _, ok := fw.seen[id]; !ok || CheckNodeID(id) != nil {
			return Event{}, false
		}
		delete(fw.seen, id)
		return Event{Kind: Leave, Entry: Entry{NodeID: id}}, true
	}
	return Event{}, false
}

// answered takes the oldest unanswered sync's time.
func (fw *follower) answered() (time.Time, bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if len(fw.pending) == 0 {
		return time.Time{}, false
	}
	at := fw.pending[0]
	fw.pending = fw.pending[1:]
	return at, true
}

// sync sends a progress request on the current stream.
func (fw *follower) sync() error {
	fw.mu.Lock()
	sctx := fw.sctx
	if sctx == nil {
		fw.mu.Unlock()
		return errNoStream
	}
	if len(fw.pending) >= 2 {
		stalled := time.Since(fw.pending[0]) > syncStall
		fw.mu.Unlock()
		if stalled {
			select {
			case fw.stall <- struct{}{}:
			default:
			}
		}
		return errSyncBusy
	}
	fw.pending = append(fw.pending, time.Now())
	fw.mu.Unlock()
	// clientv3 finds the stream by sctx's metadata; sctx lives as long as
	// the stream, so a request never opens a stream of its own.
	if err := fw.d.cli.RequestProgress(sctx); err != nil {
		fw.mu.Lock()
		if fw.sctx == sctx && len(fw.pending) > 0 {
			fw.pending = fw.pending[:len(fw.pending)-1]
		}
		fw.mu.Unlock()
		return err
	}
	return nil
}

// report sends what changed from seen to now, a full list: a leave for
// each entry seen that now lacks, a join for each entry of now that is
// new or was modified since; seen becomes now. False when ctx or the
// directory ended.
func (d *etcdDir) report(ctx context.Context, ch chan<- Event, seen map[string]int64, now []listed) bool {
	cur := make(map[string]bool, len(now))
	for _, l := range now {
		cur[l.NodeID] = true
	}
	var gone []string
	for id := range seen {
		if !cur[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		delete(seen, id)
		if !send(ctx, d.ctx, ch, Event{Kind: Leave, Entry: Entry{NodeID: id}}) {
			return false
		}
	}
	for _, l := range now {
		if seen[l.NodeID] == l.mod {
			continue
		}
		seen[l.NodeID] = l.mod
		if !send(ctx, d.ctx, ch, Event{Kind: Join, Entry: l.Entry}) {
			return false
		}
	}
	return true
}
