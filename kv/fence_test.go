package kv

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
	sl := f.acquire(st, []byte("k"))
	if sl == nil || string(sl.value()) != "old" {
		t.Fatalf("serving owner: acquire = %v, want the value", sl)
	}
	st.release(sl)
	if sl := f.acquire(st, []byte("absent")); sl != nil {
		t.Fatal("acquire of an absent key returned a slot")
	}
	f.lastGood = time.Now().Add(-2 * f.fresh) // the view went stale (paused)
	if sl := f.acquire(st, []byte("k")); sl != nil {
		st.release(sl)
		t.Fatal("a server whose view is stale answered from its store")
	}
	var nf *fence // not in a cluster: answers what it holds
	if sl := nf.acquire(st, []byte("k")); sl == nil {
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
	go func() { got <- f.acquire(st, []byte("k")) }()
	time.Sleep(50 * time.Millisecond) // let the GET reach the store, were it to look first
	st.clear()
	f.lastGood = time.Now()
	f.mu.Unlock()
	if sl := <-got; sl != nil {
		st.release(sl)
		t.Fatalf("GET across a continuity break answered %q from before it", sl.value())
	}
}
