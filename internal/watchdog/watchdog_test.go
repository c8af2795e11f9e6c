package watchdog

import (
	"context"
	"slices"
	"testing"
	"time"
)

type fakeConn struct {
	moved   uint64
	pending int
}

func (c *fakeConn) Progress() (uint64, int) { return c.moved, c.pending }

type fakePeer struct {
	conn             *fakeConn
	waiting, probing bool
	probes, stalls   int
	stalledPending   int
}

func (p *fakePeer) Conn() Conn {
	if p.conn == nil {
		return nil
	}
	return p.conn
}
func (p *fakePeer) Waiting() bool { return p.waiting }
func (p *fakePeer) Probing() bool { return p.probing }
func (p *fakePeer) Probe(c Conn) {
	if c != Conn(p.conn) {
		panic("probe of another connection")
	}
	p.probes++
}
func (p *fakePeer) Stalled(c Conn, timeout time.Duration, pending int) {
	if c != Conn(p.conn) {
		panic("stall of another connection")
	}
	p.stalls++
	p.stalledPending = pending
}

func list(ps ...Peer) func(func(Peer) bool) { return slices.Values(ps) }

const timeout = 8 * time.Second

// rounds looks at p every timeout/8 from start for n rounds, and returns
// the time after the last.
func rounds(w *watch, start time.Time, n int, ps ...Peer) time.Time {
	for i := range n {
		w.round(start.Add(time.Duration(i)*timeout/8), list(ps...))
	}
	return start.Add(time.Duration(n) * timeout / 8)
}

// TestStall: a peer with operations outstanding and no progress is declared
// stalled once per timeout, not before; one that moves is never.
func TestStall(t *testing.T) {
	w := newWatch(timeout)
	stuck := &fakePeer{conn: &fakeConn{pending: 3}}
	moving := &fakePeer{conn: &fakeConn{pending: 3}}
	now := time.Unix(0, 0)
	for i := range 8 { // the first look starts the clock: 8 more reach timeout
		w.round(now, list(stuck, moving))
		moving.conn.moved++
		now = now.Add(timeout / 8)
		if stuck.stalls != 0 {
			t.Fatalf("stalled after %d looks, before the timeout", i+1)
		}
	}
	w.round(now, list(stuck, moving))
	if stuck.stalls != 1 || stuck.stalledPending != 3 {
		t.Errorf("stuck peer: %d stalls with %d pending, want 1 with 3", stuck.stalls, stuck.stalledPending)
	}
	if moving.stalls != 0 {
		t.Errorf("moving peer stalled %d times", moving.stalls)
	}
	w.round(now.Add(timeout/8), list(stuck, moving))
	if stuck.stalls != 1 {
		t.Errorf("stalled again at once (%d): the clock starts over", stuck.stalls)
	}
}

// TestIdle: a peer with nothing outstanding and nobody waiting is neither
// probed nor stalled, however long it is quiet; nor is one without a
// connection.
func TestIdle(t *testing.T) {
	w := newWatch(timeout)
	idle := &fakePeer{conn: &fakeConn{moved: 7}}
	gone := &fakePeer{waiting: true}
	rounds(w, time.Unix(0, 0), 40, idle, gone)
	for _, p := range []*fakePeer{idle, gone} {
		if p.probes != 0 || p.stalls != 0 {
			t.Errorf("%+v: %d probes, %d stalls, want none", p, p.probes, p.stalls)
		}
	}
}

// TestProbe: a quiet peer with waiters is probed after half the timeout;
// an outstanding probe counts as an operation, so a peer that does not
// answer it is stalled, with one pending.
func TestProbe(t *testing.T) {
	w := newWatch(timeout)
	p := &fakePeer{conn: &fakeConn{}, waiting: true}
	now := rounds(w, time.Unix(0, 0), 4, p)
	if p.probes != 0 {
		t.Fatalf("probed before half the timeout")
	}
	w.round(now, list(p))
	if p.probes != 1 {
		t.Fatalf("%d probes after half the timeout, want 1", p.probes)
	}
	p.probing = true
	rounds(w, now.Add(timeout/8), 4, p)
	if p.stalls != 1 || p.stalledPending != 1 {
		t.Errorf("unanswered probe: %d stalls with %d pending, want 1 with 1", p.stalls, p.stalledPending)
	}
}

// TestNewConn: a peer's new connection starts the clock over, and a peer
// no longer listed is forgotten.
func TestNewConn(t *testing.T) {
	w := newWatch(timeout)
	p := &fakePeer{conn: &fakeConn{pending: 1}}
	now := rounds(w, time.Unix(0, 0), 8, p)
	p.conn = &fakeConn{pending: 1}
	rounds(w, now, 8, p)
	if p.stalls != 0 {
		t.Errorf("stalled %d times: a new connection must start the clock over", p.stalls)
	}
	w.round(now, list())
	if len(w.states) != 0 {
		t.Errorf("%d peers remembered after none was listed", len(w.states))
	}
}

// TestRunStops: Run returns when its context ends.
func TestRunStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, time.Millisecond, list())
	}()
	time.Sleep(5 * time.Millisecond)
	cancel()
	<-done
}
