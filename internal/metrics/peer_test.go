package metrics

import (
	"errors"
	"testing"
)

// TestPeerCountsEarly: what an accepted connection's endpoint serves and
// delivers before the peer publishes its counters is kept, and the first
// counters take it over, once.
func TestPeerCountsEarly(t *testing.T) {
	var p PeerCounts
	p.Served(false, 100)
	p.Served(false, 20)
	p.Served(true, 7)
	p.Handled(5)
	c := &Conn{}
	p.Publish(c)
	p.takeEarly(c) // a second move moves nothing
	p.Served(false, 1)
	p.Handled(3)
	for _, w := range []struct {
		name      string
		got, want uint64
	}{
		{"writes served", c.Served[0].Load(), 3},
		{"bytes written", c.ServedBytes[0].Load(), 121},
		{"reads served", c.Served[1].Load(), 1},
		{"bytes read", c.ServedBytes[1].Load(), 7},
		{"messages", c.Ops[Recv].Load(), 2},
		{"message bytes", c.Received.Load(), 8},
	} {
		if w.got != w.want {
			t.Errorf("%s: %d, want %d", w.name, w.got, w.want)
		}
	}
}

// TestPeerCountsAcrossConnections: a connection's totals stay the peer's
// when another replaces it, and the last error is kept.
func TestPeerCountsAcrossConnections(t *testing.T) {
	var p PeerCounts
	if p.Conn() != nil {
		t.Fatal("a Conn before the first Publish")
	}
	first := &Conn{}
	p.Publish(first)
	first.Delivered(10)
	second := &Conn{}
	p.Publish(second)
	second.Delivered(32)
	if p.Conn() != second {
		t.Fatal("Conn is not the last published")
	}
	if ops, bytes := p.Totals(); ops != 2 || bytes != 42 {
		t.Fatalf("Totals = %d ops, %d bytes; want 2, 42", ops, bytes)
	}
	if msg, at := p.LastErr(); msg != "" || !at.IsZero() {
		t.Fatalf("last error %q at %v before any", msg, at)
	}
	p.SetErr(errors.New("boom"))
	if msg, at := p.LastErr(); msg != "boom" || at.IsZero() {
		t.Fatalf("last error %q at %v", msg, at)
	}
}
