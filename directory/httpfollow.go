package directory

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// httpList is a coordinator's list: its entries and revision, or, where
// unchanged is set, word that the list is still at the revision asked.
type httpList struct {
	entries   []Entry
	rev       string
	unchanged bool
}

// listAt lists the entries. With since set and wait ≥ 0 it is a long
// poll: the coordinator answers once the list is no longer at revision
// since, or says it is unchanged when wait ends.
func (d *httpDir) listAt(ctx context.Context, since string, wait time.Duration) (httpList, error) {
	cl := d.o.HTTPClient
	if wait > 0 {
		// A long poll outlives the client's whole-request timeout; the
		// context bounds it instead.
		c := *cl
		c.Timeout = 0
		cl = &c
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+d.o.RequestTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url("/nodes"), nil)
	if err != nil {
		return httpList{}, fmt.Errorf("directory: %w", err)
	}
	if since != "" && wait >= 0 {
		req.URL.RawQuery = url.Values{"wait": {since}, "timeout": {wait.String()}}.Encode()
	}
	d.authorize(req)
	resp, err := cl.Do(req)
	if err != nil {
		return httpList{}, fmt.Errorf("directory: coordinator %s: %w", d.base.Host, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		io.Copy(io.Discard, resp.Body)
		return httpList{rev: since, unchanged: true}, nil
	case http.StatusOK:
	default:
		return httpList{}, fmt.Errorf("directory: list: %w", errorBody(resp))
	}
	entries, rev, err := decodeList(io.LimitReader(resp.Body, maxList), func(err error) {
		d.o.Logger.Warn("directory: skipping a malformed entry", "err", err)
	})
	return httpList{entries: entries, rev: rev}, err
}

func (d *httpDir) List(ctx context.Context) ([]Entry, error) {
	l, err := d.listAt(ctx, "", -1)
	return l.entries, err
}

// longPoll is how long a watch's poll waits for a change.
const longPoll = DefaultPollTimeout

// Watch lists the coordinator's entries, then long-polls it for changes
// (see httpFollower).
func (d *httpDir) Watch(ctx context.Context) (<-chan Event, error) {
	ch, _, err := d.follow(ctx, false)
	return ch, err
}

// Follow is Watch with Synced and Reset events and a sync (see Follower).
func (d *httpDir) Follow(ctx context.Context) (<-chan Event, func() error, error) {
	return d.follow(ctx, true)
}

func (d *httpDir) follow(ctx context.Context, synced bool) (<-chan Event, func() error, error) {
	start := time.Now()
	first, err := d.listAt(ctx, "", -1)
	if err != nil {
		return nil, nil, err
	}
	hf := &httpFollower{d: d, synced: synced, seen: map[string]string{}, syncs: make(chan time.Time, 1)}
	ch, err := d.watch(func(ch chan<- Event) { hf.run(ctx, ch, first, start) })
	if err != nil {
		return nil, nil, err
	}
	return ch, hf.sync, nil
}

// httpFollower is one Watch or Follow of a coordinator. It long-polls the
// coordinator with the revision it has: an idle cluster costs one request
// per timeout, and a change is reported as soon as it is made. A sync is
// a poll that does not wait: the coordinator answers 304, no list, when
// nothing changed. A coordinator without revisions (an older one) is
// polled every second, and each sync lists it.
type httpFollower struct {
	d      *httpDir
	synced bool              // report Synced and Reset (Follow), or not (Watch)
	seen   map[string]string // each entry reported as there, encoded
	rev    string            // the revision of what was reported
	syncs  chan time.Time    // when each sync asked, not yet served
}

func (hf *httpFollower) sync() error {
	select {
	case hf.syncs <- time.Now():
		return nil
	default:
		return errSyncBusy
	}
}

// run reports first (the list that began at start), then follows the
// coordinator until ctx ends or the directory closes.
func (hf *httpFollower) run(ctx context.Context, ch chan<- Event, first httpList, start time.Time) {
	d := hf.d
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go func() { // the directory's close ends the polls too
		select {
		case <-d.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if !hf.apply(ctx, ch, first) || !hf.sent(ctx, ch, start) {
		return
	}
	// Changes come from a poll of their own, so that a sync does not wait
	// behind a long poll.
	polls := make(chan httpList)
	wg.Go(func() { hf.poll(ctx, polls) })
	for {
		select {
		case l := <-polls:
			if !hf.apply(ctx, ch, l) {
				return
			}
		case at := <-hf.syncs:
			l, err := d.listAt(ctx, hf.rev, 0)
			if err != nil {
				d.o.Logger.Debug("directory: sync", "err", err)
				continue
			}
			if !hf.apply(ctx, ch, l) || !hf.sent(ctx, ch, at) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// poll sends the coordinator's changes to out until ctx ends: long polls
// from the revision last sent, or lists every second where the
// coordinator has no revisions.
func (hf *httpFollower) poll(ctx context.Context, out chan<- httpList) {
	rev := hf.rev
	for n := 0; ctx.Err() == nil; {
		wait := longPoll
		if rev == "" {
			wait = -1
			if !sleep(ctx, ctx, min(max(hf.d.o.TTL/4, 50*time.Millisecond), time.Second)) {
				return
			}
		}
		l, err := hf.d.listAt(ctx, rev, wait)
		if err != nil {
			if ctx.Err() == nil {
				hf.d.o.Logger.Debug("directory: watch: poll failed", "err", err)
			}
			if !sleep(ctx, ctx, backoff(n, 2*time.Second)) {
				return
			}
			n++
			continue
		}
		n = 0
		if l.unchanged {
			continue
		}
		rev = l.rev
		select {
		case out <- l:
		case <-ctx.Done():
			return
		}
	}
}

// apply reports what changed from what was reported to l, a full list (or
// nothing, where l says the list is unchanged). A list of another epoch
// than the last (the coordinator restarted) is a Reset. False when ctx
// or the directory ended.
func (hf *httpFollower) apply(ctx context.Context, ch chan<- Event, l httpList) bool {
	if l.unchanged || l.rev != "" && l.rev == hf.rev {
		return true
	}
	if l.rev != "" && hf.rev != "" && epoch(l.rev) == epoch(hf.rev) && older(l.rev, hf.rev) {
		return true // an answer that a later one overtook
	}
	if hf.synced && hf.rev != "" && epoch(l.rev) != epoch(hf.rev) && !send(ctx, hf.d.ctx, ch, Event{Kind: Reset}) {
		return false
	}
	hf.rev = l.rev
	cur := make(map[string]string, len(l.entries))
	for _, e := range l.entries {
		raw, _ := json.Marshal(e)
		cur[e.NodeID] = string(raw)
		if hf.seen[e.NodeID] != string(raw) {
			if !send(ctx, hf.d.ctx, ch, Event{Kind: Join, Entry: e}) {
				return false
			}
		}
	}
	for id := range hf.seen {
		if _, ok := cur[id]; !ok {
			if !send(ctx, hf.d.ctx, ch, Event{Kind: Leave, Entry: Entry{NodeID: id}}) {
				return false
			}
		}
	}
	hf.seen = cur
	return true
}

// sent reports Synced at at, for a Follow.
func (hf *httpFollower) sent(ctx context.Context, ch chan<- Event, at time.Time) bool {
	return !hf.synced || send(ctx, hf.d.ctx, ch, Event{Kind: Synced, At: at})
}

// epoch is a revision's epoch: a run of the coordinator.
func epoch(rev string) string {
	e, _, _ := strings.Cut(rev, "-")
	return e
}

// older reports whether revision a, of the same epoch as b, comes before b.
func older(a, b string) bool {
	_, x, _ := strings.Cut(a, "-")
	_, y, _ := strings.Cut(b, "-")
	return len(x) < len(y) || len(x) == len(y) && x < y
}
