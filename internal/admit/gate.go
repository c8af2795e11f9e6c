package admit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The bounds of a Gate whose Config leaves them zero: a listener that
// waits for one peer or a few.
const (
	DefaultMax       = 64
	DefaultPerSource = 8
)

// Config bounds a Gate. Zero means the default.
type Config struct {
	// Max bounds the connections pending at once. Default: DefaultMax.
	Max int
	// PerSource bounds the connections pending at once from one source
	// address. Default: DefaultPerSource, and never more than Max.
	PerSource int
	// Grace, for TryAdmit, is how long a pending connection is safe from
	// eviction: a newcomer that could only evict younger ones is refused
	// instead. 0: none (every pending connection may be evicted).
	Grace time.Duration
}

// Gate holds the connections that have not authenticated yet.
type Gate struct {
	max, perSource int
	grace          time.Duration

	mu       sync.Mutex
	pending  []*Ticket // oldest first
	bySource map[string]int

	evictions atomic.Uint64
	refusals  atomic.Uint64
}

// New returns a Gate with the bounds of cfg.
func New(cfg Config) *Gate {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.PerSource <= 0 {
		cfg.PerSource = DefaultPerSource
	}
	return &Gate{max: cfg.Max, perSource: min(cfg.PerSource, cfg.Max), grace: max(cfg.Grace, 0), bySource: map[string]int{}}
}

// Ticket is one pending connection's place in its Gate.
type Ticket struct {
	g       *Gate
	conn    net.Conn
	source  string
	since   time.Time // when it was admitted
	evicted bool      // under g.mu
	left    bool      // under g.mu
}

// Source is the source address a Gate counts a connection under: the
// remote host without its port.
func Source(conn net.Conn) string {
	a := conn.RemoteAddr()
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// Admit enters conn as pending. When its source already has PerSource
// connections pending, the source's oldest is evicted; else, when the
// Gate holds Max, the oldest of all is. The caller runs conn's handshake
// and then calls the Ticket's Leave.
//
// Evicting a connection marks its Ticket, then sets the connection's
// deadline in the past, so that its reads and writes fail at once; its
// owner closes it. An owner that sets a deadline of its own must check
// Evicted after it, before it reads or writes: an eviction is then never
// lost, whichever came first.
func (g *Gate) Admit(conn net.Conn) *Ticket {
	t, _ := g.admit(conn, false)
	return t
}

// TryAdmit is Admit, except that a connection pending for less than
// Config.Grace is not evicted: when the one Admit would evict is younger,
// conn is refused instead (nil, false), and the caller closes it. A real
// peer, once admitted, then has Grace to authenticate however fast strays
// arrive; one refused redials. A flood from one source can keep that
// source's newcomers out, but not evict a peer mid-handshake.
func (g *Gate) TryAdmit(conn net.Conn) (*Ticket, bool) {
	return g.admit(conn, true)
}

func (g *Gate) admit(conn net.Conn, graced bool) (*Ticket, bool) {
	now := time.Now()
	t := &Ticket{g: g, conn: conn, source: Source(conn), since: now}
	var victim *Ticket
	g.mu.Lock()
	if g.bySource[t.source] >= g.perSource {
		for _, p := range g.pending {
			if p.source == t.source {
				victim = p
				break
			}
		}
	} else if len(g.pending) >= g.max {
		victim = g.pending[0]
	}
	if victim != nil && graced && now.Sub(victim.since) < g.grace {
		g.mu.Unlock()
		g.refusals.Add(1)
		return nil, false
	}
	if victim != nil {
		victim.evicted = true
		g.removeLocked(victim)
	}
	g.pending = append(g.pending, t)
	g.bySource[t.source]++
	g.mu.Unlock()
	if victim != nil {
		g.evictions.Add(1)
		victim.conn.SetDeadline(evictedDeadline) // after its mark: see Admit
	}
	return t, true
}

// evictedDeadline is a time in the past, which fails a connection's reads
// and writes at once.
var evictedDeadline = time.Unix(1, 0)

// removeLocked takes t out of the pending list.
func (g *Gate) removeLocked(t *Ticket) {
	for i, p := range g.pending {
		if p == t {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			break
		}
	}
	if g.bySource[t.source]--; g.bySource[t.source] <= 0 {
		delete(g.bySource, t.source)
	}
	t.left = true
}

// Leave takes t's connection out of the Gate, its handshake over (it
// authenticated, or failed). It reports whether the connection was still
// pending: false means that it was evicted, and its deadline is past. A
// handshake whose reads all succeeded may keep its connection even so: the
// eviction only made room. Calling Leave again changes nothing and
// answers the same.
func (t *Ticket) Leave() bool {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if !t.left {
		g.removeLocked(t)
	}
	return !t.evicted
}

// Evicted reports whether t's connection was evicted: its owner should
// drop it (see Admit for when to ask).
func (t *Ticket) Evicted() bool {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	return t.evicted
}

// Pending is the number of connections pending now.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// Evictions is the number of connections evicted so far.
func (g *Gate) Evictions() uint64 { return g.evictions.Load() }

// Refusals is the number of connections TryAdmit refused so far.
func (g *Gate) Refusals() uint64 { return g.refusals.Load() }
