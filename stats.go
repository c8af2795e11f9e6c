package xfer

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/metrics"
)

// The engine's and each peer's counters and recent events, which Status
// reports and the log tells once.

// FallbackEvent is one fallback: the peer got a lesser transport than the
// auto policy preferred.
type FallbackEvent struct {
	Time      time.Time `json:"time"`
	Peer      string    `json:"peer"`
	Transport string    `json:"transport"` // the one given up
	Reason    string    `json:"reason"`    // unusable, setup_failed, reconnected_lesser, full, unavailable
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
// metrics, and when its current connection came up.
type peerStats struct {
	metrics.PeerCounts
	upSince atomic.Int64 // UnixNano of the current connection's start
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
