// Package failback keeps a peer's paused transport and probes it. A
// dialed peer that lost a better transport (by the auto policy's order)
// and reconnected on a lesser one keeps the better one paused, with the
// reason, and probes it with backoff; when a probe connects, the peer
// moves back to it. What a probe is (a handshake that offers the paused
// transport alone) and what moving back means (the new connection becomes
// the peer's, the lesser one drains) are the engine's: the package knows
// the peer only through [Prober].
//
// # Threading
//
// A [State] has its own lock, which it never holds while it calls out; a
// caller may hold its own locks while it calls a State's methods. [State.Run]
// is the one goroutine that probes a peer's paused transport.
package failback

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/status"
)

// The probes' backoff: the first a second after the pause, then each
// wait twice the last, up to 30 s. TENT, Mooncake's engine, pauses a rail
// for 30 s doubling to 300 s; a peer here has one live connection to
// compare with rather than several rails, a probe costs one handshake,
// and an rdma device that comes back (a NIC reset, a link that flapped)
// should carry traffic again within seconds rather than minutes.
const (
	probeFirst = time.Second
	probeMax   = 30 * time.Second
)

// Config is the probes' backoff (zero: a first probe after 1 s, waits up to
// 30 s) and the order of the transports.
type Config struct {
	First, Max time.Duration
	// Rank orders the transports as the auto policy prefers them, best
	// (lowest) first.
	Rank func(name string) int
}

func (c *Config) first() time.Duration { return cmp.Or(c.First, probeFirst) }
func (c *Config) max() time.Duration   { return cmp.Or(c.Max, probeMax) }

// Pause is a peer's paused transport. Name, Reason and Since do not
// change; the rest is guarded by its State's lock.
type Pause struct {
	Name    string
	Reason  string // why the peer left it
	Since   time.Time
	Next    time.Time     // the next probe
	Wait    time.Duration // the wait before Next
	Probes  int           // the probes that failed
	LastErr string        // the last probe's error
}

// Prober is the peer whose paused transport a State probes.
type Prober interface {
	// Try probes pt's transport and, when that connects, moves the peer to
	// it, claiming the move with State.Claim.
	Try(pt *Pause) error
	// Failed tells that a probe of pt failed with err; the next is due
	// after wait.
	Failed(pt *Pause, wait time.Duration, err error)
}

// State is one peer's failback: its paused transport, when it last moved
// back, and whether its prober runs. Its zero value has nothing paused.
type State struct {
	mu       sync.Mutex
	paused   *Pause
	proberOn bool
	// the last move back to a paused transport, and the probes' wait then
	backAt   time.Time
	backWait time.Duration
}

// Reconnected is called after the peer's new connection on transport now
// replaced a lost one: one as good as the paused transport ends the pause
// (the prober sees it and ends).
func (s *State) Reconnected(c *Config, now string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != nil && c.Rank(now) <= c.Rank(s.paused.Name) {
		s.paused = nil
	}
}

// Pause pauses transport name (left for reason): ok is false when one as
// good is paused already; wait is when the first probe is due, and start
// says that the caller must start the prober (Run), which does not run.
func (s *State) Pause(c *Config, name, reason string) (wait time.Duration, start, ok bool) {
	t := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != nil && c.Rank(s.paused.Name) <= c.Rank(name) {
		return 0, false, false
	}
	start = !s.proberOn
	s.proberOn = true
	wait = c.first()
	if !s.backAt.IsZero() && t.Sub(s.backAt) < c.max() {
		// It failed again soon after the last move back (a link that
		// flaps): the backoff goes on from where it was.
		wait = min(2*s.backWait, c.max())
	}
	s.paused = &Pause{Name: name, Reason: reason, Since: t, Wait: wait, Next: t.Add(wait)}
	return wait, start, true
}

// Claim ends the pause pt, whose probe connected, and records the move
// back; false when pt is no longer the peer's pause (replaced by a better
// one, or ended meanwhile).
func (s *State) Claim(pt *Pause) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != pt {
		return false
	}
	s.paused = nil
	s.backAt, s.backWait = time.Now(), pt.Wait
	return true
}

// Paused returns a copy of the paused transport, if any.
func (s *State) Paused() (Pause, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		return Pause{}, false
	}
	return *s.paused, true
}

// Status is the paused transports, for the peer's status.
func (s *State) Status() []status.Paused {
	pt, ok := s.Paused()
	if !ok {
		return nil
	}
	return []status.Paused{{Transport: pt.Name, Reason: pt.Reason, Since: pt.Since.UTC(), NextProbe: pt.Next.UTC(), Probes: pt.Probes, LastError: pt.LastErr}}
}

// Run probes the paused transport when due, until it is no longer paused,
// done is closed (the peer closed) or ctx ends (the engine did).
func (s *State) Run(ctx context.Context, done <-chan struct{}, c *Config, p Prober) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		pt := s.paused
		if pt == nil {
			s.proberOn = false // under mu with the check: a new pause starts another
			s.mu.Unlock()
			return
		}
		next := pt.Next
		s.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-done:
			return
		case <-ctx.Done():
			return
		}
		s.probeOnce(c, p, pt)
	}
}

// probeOnce probes pt, the paused transport, and either the peer moves to
// it or the probes back off.
func (s *State) probeOnce(c *Config, p Prober, pt *Pause) {
	s.mu.Lock()
	current := s.paused == pt
	s.mu.Unlock()
	if !current {
		return // replaced (by a better one) or ended meanwhile
	}
	err := p.Try(pt)
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.paused == pt {
		pt.Probes++
		pt.LastErr = err.Error()
		pt.Wait = min(2*pt.Wait, c.max())
		pt.Next = time.Now().Add(pt.Wait)
	}
	wait := pt.Wait
	s.mu.Unlock()
	p.Failed(pt, wait, err)
}
