package directory

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// follow opens a Follow of d and returns its channel and sync.
func follow(t *testing.T, ctx context.Context, d Directory) (<-chan Event, func() error) {
	t.Helper()
	f, ok := d.(Follower)
	if !ok {
		t.Fatalf("%T is not a Follower", d)
	}
	ch, sync, err := f.Follow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ch, sync
}

// syncedAfter calls sync until a Synced at or after the first call comes,
// and returns the joins and leaves reported before it, by node ID.
func syncedAfter(t *testing.T, ch <-chan Event, sync func() error, within time.Duration) map[string]EventKind {
	t.Helper()
	called := time.Now()
	deadline := time.Now().Add(within)
	seen := map[string]EventKind{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	sync()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("the follow ended")
			}
			switch ev.Kind {
			case Synced:
				if !ev.At.Before(called) {
					if ev.At.After(time.Now()) {
						t.Fatalf("Synced at %v, in the future", ev.At)
					}
					return seen
				}
			case Reset:
				seen["(reset)"] = Reset
			default:
				seen[ev.Entry.NodeID] = ev.Kind
			}
		case <-tick.C:
			if time.Now().After(deadline) {
				t.Fatalf("no Synced after %v within %v", called, within)
			}
			sync()
		}
	}
}

// syncOrder checks, 20 times, that a change a made before a sync comes
// before the sync's Synced.
func syncOrder(t *testing.T, ctx context.Context, a Directory, ch <-chan Event, sync func() error) {
	t.Helper()
	for i := range 20 {
		id := fmt.Sprint("n", i)
		if err := a.Register(ctx, entry(id, "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		if got := syncedAfter(t, ch, sync, 10*time.Second); got[id] != Join {
			t.Fatalf("round %d: before the Synced: %v, want %s's join", i, got, id)
		}
		if i%2 == 1 {
			if err := a.Deregister(ctx, id); err != nil {
				t.Fatal(err)
			}
			if got := syncedAfter(t, ch, sync, 10*time.Second); got[id] != Leave {
				t.Fatalf("round %d: before the Synced: %v, want %s's leave", i, got, id)
			}
		}
	}
}

// Follow reports the list, a Synced for it, then every change committed
// before a sync ahead of that sync's Synced; a watch that breaks resumes
// without a Reset, and one whose revision was compacted meanwhile reports
// a Reset, the difference, and a Synced.
func TestEtcdFollow(t *testing.T) {
	host := startEtcd(t)
	px := newCutProxy(t, host)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := mustOpen(t, "etcd://"+host+"/fw", 10*time.Second)
	if err := a.Register(ctx, entry("first", "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, "etcd://"+px.addr()+"/fw", 10*time.Second)
	before := time.Now()
	ch, sync := follow(t, ctx, w)
	if ev := next(t, ch, 10*time.Second); ev.Kind != Join || ev.Entry.NodeID != "first" {
		t.Fatalf("first event %v %s, want first's join", ev.Kind, ev.Entry.NodeID)
	}
	if ev := next(t, ch, 10*time.Second); ev.Kind != Synced || ev.At.Before(before) {
		t.Fatalf("second event %v at %v, want Synced after %v", ev.Kind, ev.At, before)
	}

	syncOrder(t, ctx, a, ch, sync)

	// A broken stream resumes where it was: no Reset, no event lost.
	px.cut()

	if err := a.Register(ctx, entry("during", "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	px.restore()
	if got := syncedAfter(t, ch, sync, 30*time.Second); got["during"] != Join || got["(reset)"] != 0 {
		t.Fatalf("after a cut: %v, want during's join and no reset", got)
	}

	// A compacted revision: a Reset, the difference, a Synced.
	churnWhileCut(t, ctx, host, px, a, "/fw", "first")
	got := syncedAfter(t, ch, sync, 30*time.Second)
	if got["(reset)"] != Reset || got["first"] != Leave || got["comes"] != Join {
		t.Fatalf("after a compaction: %v, want a reset, first's leave and comes' join", got)
	}
	if got := syncedAfter(t, ch, sync, 10*time.Second); len(got) != 0 {
		t.Fatalf("a quiet directory reported %v", got)
	}
}
