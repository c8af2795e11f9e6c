package kv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv/internal/placement"
	"github.com/xferio/xfer/mem"
)

// testFenceStore is a store of one value, "k" = "old", and a fence of a
// one-server view that serves and owns every key.
func testFenceStore(t *testing.T) (*fence, *store) {
	t.Helper()
	r, err := mem.NewRegion(mem.RegionOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	pool, err := mem.NewPool(r, mem.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(pool, Evict, storeOptions{})
	b, _, err := st.reserve(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Bytes(), "old")
	st.commit([]byte("k"), b, 3, putMeta{reps: 1})
	f := newFence(slog.Default(), st, nil, "kv-1", 2*time.Second)
	now := time.Now()
	f.started, f.ring, f.selfIdx = true, placement.New([]string{"kv-1"}), 0
	f.lastGood, f.leaseTill = now, now.Add(time.Minute)
	return f, st
}

// TestFenceAcquire: a GET is answered from the store only while the
// server serves and holds the key.
func TestFenceAcquire(t *testing.T) {
	f, st := testFenceStore(t)
	sl, _ := f.acquire(st, []byte("k"))
	if sl == nil || string(sl.value()) != "old" {
		t.Fatalf("serving owner: acquire = %v, want the value", sl)
	}
	st.release(sl)
	if sl, _ := f.acquire(st, []byte("absent")); sl != nil {
		t.Fatal("acquire of an absent key returned a slot")
	}
	f.lastGood = time.Now().Add(-2 * f.fresh) // the view went stale (paused)
	if sl, _ := f.acquire(st, []byte("k")); sl != nil {
		st.release(sl)
		t.Fatal("a server whose view is stale answered from its store")
	}
	var nf *fence // not in a cluster: answers what it holds
	if sl, _ := nf.acquire(st, []byte("k")); sl == nil {
		t.Fatal("outside a cluster: acquire = nil")
	} else {
		st.release(sl)
	}
}

// TestFenceAcquireAcrossBreak: a GET that arrives while the server, just
// resumed, has not yet noticed the break must not answer the value from
// before it, even when the break's tick (which drops every value and makes
// the view fresh again) runs between its lookup and its check. The test
// holds the view's lock as the tick does, starts the GET, drops the value
// and freshens the view, then lets the GET go: it must find nothing.
func TestFenceAcquireAcrossBreak(t *testing.T) {
	f, st := testFenceStore(t)
	f.lastGood = time.Now().Add(-2 * f.fresh) // paused: the view is stale
	f.mu.Lock()
	got := make(chan *slot, 1)
	go func() { sl, _ := f.acquire(st, []byte("k")); got <- sl }()
	time.Sleep(50 * time.Millisecond) // let the GET reach the store, were it to look first
	st.clear()
	f.lastGood = time.Now()
	f.mu.Unlock()
	if sl := <-got; sl != nil {
		st.release(sl)
		t.Fatalf("GET across a continuity break answered %q from before it", sl.value())
	}
}

// keyOwnedBy returns a key that ring places on server id.
func keyOwnedBy(t *testing.T, r *placement.Ring, id, prefix string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if r.IDs()[r.Owner(placement.Key(k))] == id {
			return k
		}
	}
	t.Fatalf("no key of %s", id)
	return ""
}

func putTest(t *testing.T, f *fence, st *store, key, value string) {
	t.Helper()
	b, _, err := st.reserve(context.Background(), len(value))
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Bytes(), value)
	st.commit([]byte(key), b, len(value), putMeta{reps: 1, vgen: f.gen})
}

// TestFenceJoinThenLeave: when a server joins and takes a key, this server
// stops answering it at once, before any rescan, and still does not when
// the joiner leaves again (the key comes back, but the value may be stale:
// the joiner may have taken a newer write). The rescan drops it, keeps the
// keys that stayed, and forgets the join.
func TestFenceJoinThenLeave(t *testing.T) {
	f, st := testFenceStore(t)
	st.remove([]byte("k"), true)
	f.gen = 1
	two := placement.New([]string{"kv-1", "kv-2"})
	moved := keyOwnedBy(t, two, "kv-2", "moved")
	stayed := keyOwnedBy(t, two, "kv-1", "stayed")
	putTest(t, f, st, moved, "old")
	putTest(t, f, st, stayed, "kept")
	get := func(key string) string {
		sl, _ := f.acquire(st, []byte(key))
		if sl == nil {
			return ""
		}
		defer st.release(sl)
		return string(sl.value())
	}
	if get(moved) != "old" || get(stayed) != "kept" {
		t.Fatal("before the join: the values are not answered")
	}
	f.mu.Lock()
	f.applyLocked([]string{"kv-1", "kv-2"}) // kv-2 joins
	f.mu.Unlock()
	if v := get(moved); v != "" {
		t.Fatalf("after kv-2 joined and took %s, this server answered %q", moved, v)
	}
	f.mu.Lock()
	f.applyLocked([]string{"kv-1"}) // kv-2 leaves: the key is this server's again
	f.mu.Unlock()
	if v := get(moved); v != "" {
		t.Fatalf("after kv-2 came and went, this server answered %s = %q from before", moved, v)
	}
	if get(stayed) != "kept" {
		t.Fatalf("%s, which stayed with this server, is not answered", stayed)
	}
	f.rescanOnce(context.Background())
	if n := f.dropped.Load(); n != 1 {
		t.Errorf("the rescan dropped %d values, want 1", n)
	}
	if len(f.joins) != 0 {
		t.Errorf("the rescan left %d joins", len(f.joins))
	}
	if keys, _ := st.counts(); keys != 1 || get(stayed) != "kept" {
		t.Errorf("after the rescan: %d keys, %s = %q", keys, stayed, get(stayed))
	}
	putTest(t, f, st, moved, "new") // a PUT in the current view is answered
	if v := get(moved); v != "new" {
		t.Errorf("a value written after the rescan: %q", v)
	}
}

// TestStoreScan: a scan in slices checks every value there was at its
// start, although values are removed and added between its slices.
func TestStoreScan(t *testing.T) {
	_, st := testFenceStore(t)
	st.remove([]byte("k"), true)
	f := &fence{}
	const n = 3000
	for i := range n {
		putTest(t, f, st, fmt.Sprintf("o-%d", i), "v")
	}
	seen := map[string]bool{}
	removed := map[string]bool{}
	next, added := 0, 0
	for hi := n; hi > 0; {
		hi, _ = st.scan(hi, 97, func(s *slot) bool {
			seen[s.key] = true
			return !strings.HasSuffix(s.key, "7") // drop some
		})
		for range 5 { // others come and go between the slices
			k := fmt.Sprintf("o-%d", (next*7919)%n)
			next++
			if !seen[k] {
				removed[k] = true
			}
			st.remove([]byte(k), true)
			putTest(t, f, st, fmt.Sprintf("new-%d", added), "v")
			added++
		}
	}
	for i := range n {
		if k := fmt.Sprintf("o-%d", i); !seen[k] && !removed[k] {
			t.Fatalf("the scan missed %s", k)
		}
	}
	for _, s := range st.all {
		if strings.HasSuffix(s.key, "7") && strings.HasPrefix(s.key, "o-") && seen[s.key] {
			t.Fatalf("%s was rejected but is still stored", s.key)
		}
		if st.all[s.idx] != s || st.m[s.key] != s {
			t.Fatalf("%s: index or map out of step", s.key)
		}
	}
	if keys, _ := st.counts(); keys != len(st.all) {
		t.Fatalf("%d keys, %d in the scan's list", keys, len(st.all))
	}
}

// regDir is a directory whose only use here is this server's registration
// (the fence reads it at each confirmation); the fence's events come from
// a channel the test feeds, so the test plays the directory's Follow.
type regDir struct {
	directory.Directory
	reg directory.Registration
}

func (d *regDir) Registrations() []directory.Registration { return []directory.Registration{d.reg} }

// TestFenceFollow: a fence that follows the directory serves once a
// Synced confirms a view with itself in it; it keeps its values across
// confirmations, applies a join between them, drops every value at a
// Synced after a Reset or after a gap longer than fresh, and takes writes
// at once after a restart that took its ID over.
func TestFenceFollow(t *testing.T) {
	f, st := testFenceStore(t)
	f.started, f.ring, f.selfIdx, f.lastGood = false, nil, -1, time.Time{}
	d := &regDir{reg: directory.Registration{NodeID: "kv-1", State: directory.Registered, Renewed: time.Now(), TookOver: true}}
	f.dir = d
	ch := make(chan directory.Event)
	syncs := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		f.follow(ch, func() error { syncs <- struct{}{}; return nil })
		close(done)
	}()
	join := func(id string) {
		ch <- directory.Event{Kind: directory.Join, Entry: directory.Entry{NodeID: id, Services: map[string]string{ServiceName: "127.0.0.1:1"}}}
	}
	synced := func(at time.Time) {
		d.reg.Renewed = time.Now()
		ch <- directory.Event{Kind: directory.Synced, At: at}
		ch <- directory.Event{Kind: directory.Leave, Entry: directory.Entry{NodeID: "nobody"}} // a no-op: the Synced was applied
	}
	serving := func() bool {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return f.servingLocked(time.Now())
	}
	join("kv-1")
	if serving() {
		t.Fatal("serving before any Synced")
	}
	synced(time.Now())
	if !serving() {
		t.Fatal("not serving after a Synced of a view with itself in it")
	}
	// The first confirmation dropped what the store held (a new view);
	// from now on values stay.
	b, _, err := st.reserve(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Bytes(), "new")
	st.commit([]byte("k"), b, 3, putMeta{reps: 1})
	if _, err := f.admit([]byte("k"), 1); err != nil {
		t.Fatalf("a restart that took its ID over refuses writes: %v", err)
	}
	synced(time.Now())
	if sl, _ := f.acquire(st, []byte("k")); sl == nil {
		t.Fatal("a confirmation without a break dropped the value")
	} else {
		st.release(sl)
	}
	// A join between confirmations applies at once.
	join("kv-2")
	ch <- directory.Event{Kind: directory.Leave, Entry: directory.Entry{NodeID: "nobody"}}
	f.mu.RLock()
	ids := f.ring.IDs()
	f.mu.RUnlock()
	if fmt.Sprint(ids) != "[kv-1 kv-2]" {
		t.Fatalf("view after a join: %v, want [kv-1 kv-2]", ids)
	}
	// A Reset: the next Synced breaks continuity.
	breaks := f.breaks.Load()
	ch <- directory.Event{Kind: directory.Reset}
	synced(time.Now())
	if f.breaks.Load() != breaks+1 {
		t.Fatalf("breaks after a Reset: %d, want %d", f.breaks.Load(), breaks+1)
	}
	// A gap longer than fresh between confirmations breaks it too.
	synced(time.Now().Add(2 * f.fresh))
	if f.breaks.Load() != breaks+2 {
		t.Fatalf("breaks after a gap: %d, want %d", f.breaks.Load(), breaks+2)
	}
	f.mu.RLock()
	ready := f.readyAt
	f.mu.RUnlock()
	if time.Until(ready) < f.fresh {
		t.Fatalf("after a break, writes are taken in %v, want 2 × fresh", time.Until(ready))
	}
	close(ch)
	<-done
}
