package metrics

import (
	"sync"
	"sync/atomic"
	"time"
)

// PeerCounts are one peer's counters across its connections: the current
// connection's Conn, the totals of the connections before it, what its
// first connection served and delivered before its Conn was published,
// and the peer's last error. Its zero value is ready; safe for concurrent
// use.
type PeerCounts struct {
	conn atomic.Pointer[Conn] // the current connection's counters
	// prevOps and prevBytes are the totals of the earlier connections.
	prevOps, prevBytes atomic.Uint64
	// early holds what an accepted connection's endpoint served and
	// delivered before the peer published its counters: the first Conn
	// published takes it over.
	early struct {
		served, servedBytes [2]atomic.Uint64
		recvOps, recvBytes  atomic.Uint64
	}

	mu        sync.Mutex
	lastErr   string
	lastErrAt time.Time
}

// Conn returns the current connection's counters, or nil before the first.
func (p *PeerCounts) Conn() *Conn { return p.conn.Load() }

// Publish makes c the current connection's counters: the totals of the
// one it replaces go to the peer's earlier ones, and what was counted
// before the first Conn goes to c.
func (p *PeerCounts) Publish(c *Conn) {
	if old := p.conn.Swap(c); old != nil {
		ops, bytes := old.Totals()
		p.prevOps.Add(ops)
		p.prevBytes.Add(bytes)
	}
	p.takeEarly(c)
}

// Totals returns the operations and bytes of all the peer's connections.
func (p *PeerCounts) Totals() (ops, bytes uint64) {
	ops, bytes = p.prevOps.Load(), p.prevBytes.Load()
	if c := p.conn.Load(); c != nil {
		o, b := c.Totals()
		ops, bytes = ops+o, bytes+b
	}
	return ops, bytes
}

// Served counts a peer's one-sided access of n bytes that this engine
// resolved: a write into its memory (read false) or a read.
func (p *PeerCounts) Served(read bool, n uint64) {
	i := 0
	if read {
		i = 1
	}
	c := p.conn.Load()
	if c == nil {
		// The endpoint serves a moment before the peer publishes its
		// counters: keep the count for them.
		p.early.served[i].Add(1)
		p.early.servedBytes[i].Add(n)
		if c = p.conn.Load(); c != nil {
			p.takeEarly(c) // published meanwhile
		}
		return
	}
	c.Served[i].Add(1)
	c.ServedBytes[i].Add(n)
}

// Handled counts a message of n bytes delivered to the peer's handler: a
// receive without a latency, since nobody waited for it.
func (p *PeerCounts) Handled(n int) {
	c := p.conn.Load()
	if c == nil {
		// Delivered a moment before the peer published its counters.
		p.early.recvOps.Add(1)
		p.early.recvBytes.Add(uint64(n))
		if c = p.conn.Load(); c != nil {
			p.takeEarly(c)
		}
		return
	}
	c.Delivered(n)
}

// takeEarly moves what was counted before the peer had counters into c.
// Each count moves once, whoever moves it: Publish, or a counter that
// found none and then c.
func (p *PeerCounts) takeEarly(c *Conn) {
	e := &p.early
	for i := range e.served {
		c.Served[i].Add(e.served[i].Swap(0))
		c.ServedBytes[i].Add(e.servedBytes[i].Swap(0))
	}
	c.Ops[Recv].Add(e.recvOps.Swap(0))
	c.Received.Add(e.recvBytes.Swap(0))
}

// SetErr records err as the peer's last error.
func (p *PeerCounts) SetErr(err error) {
	p.mu.Lock()
	p.lastErr, p.lastErrAt = err.Error(), time.Now().UTC()
	p.mu.Unlock()
}

// LastErr returns the peer's last error and when it happened.
func (p *PeerCounts) LastErr() (string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr, p.lastErrAt
}
