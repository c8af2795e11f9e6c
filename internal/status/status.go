// Package status holds the parts of the engine's status report (what
// Engine.Status returns, `xfer status` prints and the CLI's
// /api/v1/transport/status serves) and the log of recent events it
// reports: fallbacks and failovers, counted, kept (the latest 32 of each)
// and logged at Warn once per peer and reason. The root package names each
// part under its public name (xfer.PeerStatus is [Peer], and so on) and
// fills them; this package knows nothing of engines or peers.
package status

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/transport"
)

// Directory is an engine's directory and, when it has a node ID, the state
// of its entry there.
type Directory struct {
	URL string `json:"url"`
	// Registration is the entry's state (registered; retrying: renewals
	// are failing; lost: it is being registered again), when and why it
	// entered it, and how often it was lost and registered again.
	Registration *directory.Registration `json:"registration,omitempty"`
}

// GPU describes an engine's use of GPUs: the devices it has opened and the
// pinned host memory that stages GPU memory for transports that move host
// memory only (tcp, and rdma's local operations).
type GPU struct {
	Devices []int `json:"devices"`
	// StagingBytes is the staging memory's size (0 before the first
	// staged operation), StagingUsedBytes what operations in flight hold,
	// and StagingPinned whether the driver pinned it (unpinned staging
	// works, slower).
	StagingBytes     uint64 `json:"staging_bytes"`
	StagingUsedBytes uint64 `json:"staging_used_bytes"`
	StagingPinned    bool   `json:"staging_pinned"`
}

// Transport says whether a transport can be used on this host.
type Transport struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Reason is why it is not available (the probe's error), or why the
	// policy excludes it.
	Reason string `json:"reason,omitempty"`
	// Caps are what the transport can do: same host only, several
	// connections, the memory kinds it moves itself, and who enforces a
	// region's rights against a peer.
	Caps transport.Caps `json:"caps"`
	// Device is the device, port and GID the transport has open (rdma's).
	Device *transport.DeviceInUse `json:"device,omitempty"`
	// Rails are the devices of a transport over several (rdma.devices):
	// each up or down, and how often it failed under a connection.
	Rails []transport.RailStatus `json:"rails,omitempty"`
}

// Peer describes one peer. Ops, Bytes and LastError are kept only when the
// engine has metrics (Config.Metrics); without them they stay 0 and empty.
type Peer struct {
	Addr      string `json:"addr"`
	ID        string `json:"id"`
	Transport string `json:"transport"`
	// Connected reports whether the peer's current connection is up;
	// UpSince is when it came up.
	Connected bool      `json:"connected"`
	UpSince   time.Time `json:"up_since,omitzero"`
	// Ops and Bytes count this engine's completed operations with the
	// peer and their payload bytes, both ways.
	Ops         uint64    `json:"ops"`
	Bytes       uint64    `json:"bytes"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Paused are the better transports a dialed peer lost and probes,
	// with backoff, to move back to (see docs/OPERATIONS.md).
	Paused []Paused `json:"paused,omitempty"`
}

// ComparePeers orders peers by address, then by ID.
func ComparePeers(a, b Peer) int { return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.ID, b.ID)) }

// Pool is the default pool's state, in bytes.
type Pool struct {
	Capacity      uint64  `json:"capacity_bytes"`
	Used          uint64  `json:"used_bytes"`
	Free          uint64  `json:"free_bytes"`
	LargestFree   uint64  `json:"largest_free_bytes"`
	Fragmentation float64 `json:"fragmentation"`
	Allocated     int     `json:"allocated_buffers"`
	Failures      uint64  `json:"failed_allocs"`
	// Memory is where the pool lives: "host" or "cuda:N".
	Memory string `json:"memory"`
}

// Paused is a better transport a dialed peer lost and probes with backoff
// (Peer.Paused).
type Paused struct {
	Transport string    `json:"transport"`
	Reason    string    `json:"reason"` // why the peer left it
	Since     time.Time `json:"since"`
	NextProbe time.Time `json:"next_probe"`
	// Probes counts the probes that failed, LastError the last one's
	// error.
	Probes    int    `json:"probes"`
	LastError string `json:"last_error,omitempty"`
}

// Fallback is one fallback: the peer got a lesser transport than the auto
// policy preferred.
type Fallback struct {
	Time      time.Time `json:"time"`
	Peer      string    `json:"peer"`
	Transport string    `json:"transport"` // the one given up
	Reason    string    `json:"reason"`    // unusable, setup_failed, reconnected_lesser, full, unavailable
	Detail    string    `json:"detail"`    // the error
}

// Failover is one failover: an operation whose connection was lost,
// repeated on a new connection to the same peer (on the next transport of
// the policy when its own went away: a removed rdma device, say); or, with
// reason recovered, a peer's move back to a paused transport that answered
// a probe (Attempts are then the probes, Op is empty).
type Failover struct {
	Time     time.Time `json:"time"`
	Peer     string    `json:"peer"`
	From     string    `json:"from"`     // the transport the connection was lost on
	To       string    `json:"to"`       // the transport it was repeated on
	Op       string    `json:"op"`       // read or write
	Attempts int       `json:"attempts"` // the posts it took, the first included
	Reason   string    `json:"reason"`   // connection_lost or recovered
}

// MaxRecent bounds the events a Log keeps of each kind.
const MaxRecent = 32

// maxWarned bounds the memory of which warnings were logged: past it the
// set starts over, so a warning may be repeated but memory stays bounded.
const maxWarned = 4096

// Log is an engine's counters and recent events. Its zero value is ready.
type Log struct {
	Fallbacks, SetupRetries, Failovers atomic.Uint64

	mu        sync.Mutex
	warned    map[warnKey]struct{} // warnings already logged at Warn
	fallbacks []Fallback           // the latest, oldest first
	failovers []Failover           // the latest, oldest first
}

// warnKey is what a warning is logged once for: a peer (its address or
// engine ID) and the reason (what fell back to what, and why).
type warnKey struct{ peer, reason string }

// push appends ev to s, dropping the oldest past MaxRecent.
func push[T any](s []T, ev T) []T {
	if len(s) >= MaxRecent {
		s = append(s[:0], s[1:]...)
	}
	return append(s, ev)
}

// Fallback counts and keeps ev.
func (l *Log) Fallback(ev Fallback) {
	l.Fallbacks.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fallbacks = push(l.fallbacks, ev)
}

// Failover counts and keeps ev.
func (l *Log) Failover(ev Failover) {
	l.Failovers.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failovers = push(l.failovers, ev)
}

// Recent returns the kept fallbacks and failovers, oldest first.
func (l *Log) Recent() ([]Fallback, []Failover) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fallbacks), slices.Clone(l.failovers)
}

// WarnOnce logs msg to log at Warn the first time a peer falls back or
// over for a reason, and at Debug after that: an operator sees each once,
// and a peer that reconnects in a loop does not flood the log.
func (l *Log) WarnOnce(log *slog.Logger, peer, reason, msg string, args ...any) {
	k := warnKey{peer, reason}
	l.mu.Lock()
	_, seen := l.warned[k]
	if !seen {
		if l.warned == nil || len(l.warned) >= maxWarned {
			l.warned = make(map[warnKey]struct{})
		}
		l.warned[k] = struct{}{}
	}
	l.mu.Unlock()
	args = append(args, "peer", peer)
	if seen {
		log.Debug(msg, args...)
		return
	}
	log.Warn(msg+" (logged once per peer and reason)", args...)
}
