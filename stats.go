package xfer

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/transport"
)

// The engine's and each peer's counters and recent events, which Status
// reports and the log tells once.

// FallbackEvent is one fallback: the peer got a lesser transport than the
// auto policy preferred.
type FallbackEvent struct {
	Time      time.Time `json:"time"`
	Peer      string    `json:"peer"`
	Transport string    `json:"transport"` // the one given up
	Reason    string    `json:"reason"`    // unusable, setup_failed, reconnected_lesser
	Detail    string    `json:"detail"`    // the error
}

// FailoverEvent is one failover: an operation whose connection was lost,
// repeated on a new connection to the same peer (on the next transport of
// the policy when its own went away: a removed rdma device, say); or, with
// reason recovered, a peer's move back to a paused transport that answered
// a probe (Attempts are then the probes, Op is empty).
type FailoverEvent struct {
	Time     time.Time `json:"time"`
	Peer     string    `json:"peer"`
	From     string    `json:"from"`     // the transport the connection was lost on
	To       string    `json:"to"`       // the transport it was repeated on
	Op       string    `json:"op"`       // read or write
	Attempts int       `json:"attempts"` // the posts it took, the first included
	Reason   string    `json:"reason"`   // connection_lost or recovered
}

// peerStats are a peer's counters for Status, kept when the engine has
// metrics.
type peerStats struct {
	conn    atomic.Pointer[metrics.Conn] // the current connection's counters
	upSince atomic.Int64                 // UnixNano of the current connection's start
	// prevOps and prevBytes are the counts of the peer's earlier
	// connections.
	prevOps, prevBytes atomic.Uint64
	// early holds what an accepted connection's endpoint served and
	// delivered before the peer published its counters (setEndpoint):
	// the first connection's counters take it over (takeEarly).
	early struct {
		served, servedBytes [2]atomic.Uint64
		recvOps, recvBytes  atomic.Uint64
	}

	mu        sync.Mutex
	lastErr   string
	lastErrAt time.Time
}

func (s *peerStats) setErr(err error) {
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), time.Now().UTC()
	s.mu.Unlock()
}

// maxRecentFallbacks bounds Status.RecentFallbacks.
const maxRecentFallbacks = 32

func (s *engineStats) recordFallback(ev FallbackEvent) {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	if len(s.recent) >= maxRecentFallbacks {
		s.recent = append(s.recent[:0], s.recent[1:]...)
	}
	s.recent = append(s.recent, ev)
}

func (s *engineStats) recordFailover(ev FailoverEvent) {
	s.failovers.Add(1)
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	if len(s.recentFO) >= maxRecentFallbacks {
		s.recentFO = append(s.recentFO[:0], s.recentFO[1:]...)
	}
	s.recentFO = append(s.recentFO, ev)
}

func (s *engineStats) recentFailovers() []FailoverEvent {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	return slices.Clone(s.recentFO)
}

func (s *engineStats) recentFallbacks() []FallbackEvent {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	return slices.Clone(s.recent)
}

type engineStats struct {
	fallbacks    atomic.Uint64
	setupRetries atomic.Uint64

	warnMu sync.Mutex
	warned map[warnKey]struct{} // fallbacks already logged at Warn
	recent []FallbackEvent      // the latest fallbacks, for Status; guarded by warnMu

	failovers atomic.Uint64
	recentFO  []FailoverEvent // the latest failovers, for Status; guarded by warnMu
}

// warnKey is what a fallback warning is logged once for: a peer (its
// address or engine ID) and the reason (what fell back to what, and why).
type warnKey struct{ peer, reason string }

// maxWarned bounds the memory of which fallbacks were logged: past it the
// set starts over, so a warning may be repeated but memory stays bounded.
const maxWarned = 4096

// warnOnce logs a fallback to log at Warn the first time a peer falls back
// for a reason, and at Debug after that: an operator sees each once, and a
// peer that reconnects in a loop does not flood the log.
func (s *engineStats) warnOnce(log *slog.Logger, peer, reason, msg string, args ...any) {
	k := warnKey{peer, reason}
	s.warnMu.Lock()
	_, seen := s.warned[k]
	if !seen {
		if s.warned == nil || len(s.warned) >= maxWarned {
			s.warned = make(map[warnKey]struct{})
		}
		s.warned[k] = struct{}{}
	}
	s.warnMu.Unlock()
	args = append(args, "peer", peer)
	if seen {
		log.Debug(msg, args...)
		return
	}
	log.Warn(msg+" (logged once per peer and reason)", args...)
}

// served counts a peer's one-sided access of n bytes that this engine
// resolved (transport.Host.Resolve): a write into its memory or a read.
func (s *peerStats) served(want transport.Access, n uint64) {
	i := 0
	if want == transport.AccessRead {
		i = 1
	}
	c := s.conn.Load()
	if c == nil {
		// The endpoint serves a moment before the peer publishes its
		// counters: keep the count for them.
		s.early.served[i].Add(1)
		s.early.servedBytes[i].Add(n)
		if c = s.conn.Load(); c != nil {
			s.takeEarly(c) // published meanwhile
		}
		return
	}
	c.Served[i].Add(1)
	c.ServedBytes[i].Add(n)
}

// takeEarly moves what was counted before the peer had counters (early)
// into c. Each count moves once, whoever moves it: setEndpoint after it
// publishes c, or a counter that found none and then c.
func (s *peerStats) takeEarly(c *metrics.Conn) {
	e := &s.early
	for i := range e.served {
		c.Served[i].Add(e.served[i].Swap(0))
		c.ServedBytes[i].Add(e.servedBytes[i].Swap(0))
	}
	c.Ops[metrics.Recv].Add(e.recvOps.Swap(0))
	c.Received.Add(e.recvBytes.Swap(0))
}

// handled counts a message of n bytes delivered to the peer's handler
// (Peer.Handle): a recv without a latency, since nobody waited in Recv.
func (s *peerStats) handled(n int) {
	c := s.conn.Load()
	if c == nil {
		// Delivered a moment before the peer published its counters.
		s.early.recvOps.Add(1)
		s.early.recvBytes.Add(uint64(n))
		if c = s.conn.Load(); c != nil {
			s.takeEarly(c)
		}
		return
	}
	c.Delivered(n)
}
