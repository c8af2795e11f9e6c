package xfer

import (
	"testing"

	"github.com/xferio/xfer/internal/metrics"
)

// TestEarlyCounts: what an accepted connection's endpoint serves and
// delivers before the peer publishes its counters is kept, and the first
// counters take it over, once.
func TestEarlyCounts(t *testing.T) {
	p := &Peer{}
	p.stats.served(AccessWrite, 100)
	p.stats.served(AccessWrite, 20)
	p.stats.served(AccessRead, 7)
	p.stats.handled(5)
	c := &metrics.Conn{}
	p.stats.conn.Store(c)
	p.stats.takeEarly(c) // as setEndpoint does once it has published c
	p.stats.takeEarly(c) // a second move moves nothing
	p.stats.served(AccessWrite, 1)
	p.stats.handled(3)
	want := []struct {
		name      string
		got, want uint64
	}{
		{"writes served", c.Served[0].Load(), 3},
		{"bytes written", c.ServedBytes[0].Load(), 121},
		{"reads served", c.Served[1].Load(), 1},
		{"bytes read", c.ServedBytes[1].Load(), 7},
		{"messages", c.Ops[metrics.Recv].Load(), 2},
		{"message bytes", c.Received.Load(), 8},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("%s: %d, want %d", w.name, w.got, w.want)
		}
	}
}
