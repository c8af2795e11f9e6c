package xfer

import (
	"sync/atomic"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/status"
)

// The engine's and each peer's counters and recent events, which Status
// reports and the log tells once (internal/status keeps them).

// FallbackEvent is one fallback: the peer got a lesser transport than the
// auto policy preferred.
type FallbackEvent = status.Fallback

// FailoverEvent is one failover: an operation whose connection was lost,
// repeated on a new connection to the same peer; or, with reason
// recovered, a peer's move back to a paused transport.
type FailoverEvent = status.Failover

// peerStats are a peer's counters for Status, kept when the engine has
// metrics, and when its current connection came up.
type peerStats struct {
	metrics.PeerCounts
	upSince atomic.Int64 // UnixNano of the current connection's start
}
