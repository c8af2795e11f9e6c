package watchdog

import (
	"context"
	"iter"
	"time"
)

// Conn is a peer's connection as the watchdog sees it: an endpoint that can
// tell whether its peer makes progress (transport.Progresser). It must be
// comparable: the watchdog starts afresh when a peer's Conn changes.
type Conn interface {
	// Progress returns a count that grows whenever bytes move between the
	// connection and its peer, and how many posted operations are
	// outstanding.
	Progress() (moved uint64, pending int)
}

// Peer is a peer the watchdog watches. Its methods are called from the
// watchdog's goroutine only, and must not block.
type Peer interface {
	// Conn returns the peer's connection now: nil when it has none, or
	// when its connection cannot tell its progress (it is not watched).
	Conn() Conn
	// Waiting reports whether goroutines wait for the peer to send.
	Waiting() bool
	// Probing reports whether a probe asked for by Probe is still out.
	Probing() bool
	// Probe asks the quiet peer, over c, something it must answer.
	Probe(c Conn)
	// Stalled is told that c moved nothing for timeout while pending
	// operations (or a probe) were outstanding: the peer's connection must
	// be closed.
	Stalled(c Conn, timeout time.Duration, pending int)
}

// Run looks at every peer that peers lists, every timeout/8, until ctx
// ends.
func Run(ctx context.Context, timeout time.Duration, peers iter.Seq[Peer]) {
	w := newWatch(timeout)
	tick := time.NewTicker(timeout / 8)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			w.round(now, peers)
		}
	}
}

// watch is what the watchdog remembers between looks.
type watch struct {
	timeout time.Duration
	states  map[Peer]*state
	gen     uint64 // the round's number: a state not seen in it is forgotten
}

// state is what the watchdog remembers of a peer.
type state struct {
	conn  Conn
	moved uint64
	since time.Time // when moved last changed, or operations began to wait
	gen   uint64
}

func newWatch(timeout time.Duration) *watch {
	return &watch{timeout: timeout, states: map[Peer]*state{}}
}

// round looks at every peer once, at now, and forgets the peers no longer
// listed.
func (w *watch) round(now time.Time, peers iter.Seq[Peer]) {
	w.gen++
	for p := range peers {
		s := w.states[p]
		if s == nil {
			s = &state{}
			w.states[p] = s
		}
		s.gen = w.gen
		w.look(now, p, s)
	}
	for p, s := range w.states {
		if s.gen != w.gen {
			delete(w.states, p)
		}
	}
}

// look is one look at p, whose state is s.
func (w *watch) look(now time.Time, p Peer, s *state) {
	c := p.Conn()
	if c == nil {
		s.conn = nil
		return
	}
	moved, pending := c.Progress()
	waiting := p.Waiting()
	if c != s.conn || pending == 0 && !waiting || moved != s.moved {
		s.conn, s.moved, s.since = c, moved, now
		return
	}
	if pending == 0 && p.Probing() {
		pending = 1 // the probe is outstanding, whatever the connection counts
	}
	if pending == 0 {
		// Only waiters, and a quiet peer: an idle peer is no failure,
		// but one that does not answer a probe either is stalled.
		if now.Sub(s.since) >= w.timeout/2 {
			p.Probe(c)
		}
		return
	}
	if now.Sub(s.since) < w.timeout {
		return
	}
	s.since = now
	p.Stalled(c, w.timeout, pending)
}
