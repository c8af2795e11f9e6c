package xfer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/transport"
)

// Failback: a dialed peer that lost a better transport (by the auto
// policy's order) and reconnected on a lesser one keeps the better one
// paused, with the reason, and probes it with backoff: a handshake that
// offers the paused transport alone. When a probe connects, the new
// connection becomes the peer's, and the lesser one is closed once the
// operations posted on it have ended. A peer this engine accepted follows:
// the dialer's probe names the Welcome token of the connection it replaces
// (wire.CapResume), and the acceptor puts the new connection under that
// connection's peer, which Accept returned once and does not return again.

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

// available is t.Available, unless a test refuses t.
func (e *Engine) available(t transport.Transport) error {
	if f := e.fb.refuse; f != nil {
		if err := f(t.Name()); err != nil {
			return err
		}
	}
	return t.Available()
}

// PausedTransport is a better transport a dialed peer lost and probes with
// backoff (PeerStatus.Paused).
type PausedTransport struct {
	Transport string    `json:"transport"`
	Reason    string    `json:"reason"` // why the peer left it
	Since     time.Time `json:"since"`
	NextProbe time.Time `json:"next_probe"`
	// Probes counts the probes that failed, LastError the last one's
	// error.
	Probes    int    `json:"probes"`
	LastError string `json:"last_error,omitempty"`
}

// reconnected is called after a dialed peer's new connection on now
// replaced one on prev (lost with why): a lesser transport pauses prev; one
// as good as the paused transport ends the pause.
func (p *Peer) reconnected(prev, now string, why error) {
	if prev == "" || p.policy != PolicyAuto {
		return
	}
	if rank(now) > rank(prev) {
		reason := "connection lost"
		if why != nil {
			reason = why.Error()
		}
		p.pause(prev, now, reason)
		return
	}
	p.mu.Lock()
	if p.paused != nil && rank(now) <= rank(p.paused.name) {
		p.paused = nil // the prober sees it and ends
	}
	p.mu.Unlock()
}

// pause pauses transport name, which the peer left for now, and starts the
// prober unless it runs.
func (p *Peer) pause(name, now, reason string) {
	e := p.e
	first := cmp.Or(e.fb.first, probeFirst)
	t := time.Now()
	p.mu.Lock()
	if p.closed || p.paused != nil && rank(p.paused.name) <= rank(name) {
		p.mu.Unlock()
		return // closing, or already probing one as good
	}
	start := !p.proberOn
	p.proberOn = true
	wait := first
	if last := p.movedBack; !last.at.IsZero() && t.Sub(last.at) < cmp.Or(e.fb.max, probeMax) {
		// It failed again soon after the last move back (a link that
		// flaps): the backoff goes on from where it was.
		wait = min(2*last.wait, cmp.Or(e.fb.max, probeMax))
	}
	p.paused = &pauseState{name: name, reason: reason, since: t, wait: wait, next: t.Add(wait)}
	p.mu.Unlock()
	e.log.Warn("transport paused for a peer; probing it with backoff", "peer", p, "paused", name, "now", now, "first_probe_in", wait, "reason", reason)
	if !start {
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.wg.Add(1) // under e.mu, before Close waits
	e.mu.Unlock()
	go p.prober()
}

// prober probes the peer's paused transport when due, until it is no
// longer paused, the peer closes or the engine does.
func (p *Peer) prober() {
	defer p.e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		pt := p.paused
		if pt == nil || p.closed {
			p.proberOn = false // under mu with the check: a new pause starts another
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		timer.Reset(time.Until(pt.next))
		select {
		case <-timer.C:
		case <-p.done:
			return
		case <-p.e.ctx.Done():
			return
		}
		p.probeOnce(pt)
	}
}

// probeOnce probes pt, the paused transport, and either moves the peer
// to it or backs off.
func (p *Peer) probeOnce(pt *pauseState) {
	e := p.e
	p.mu.Lock()
	current := p.paused == pt
	p.mu.Unlock()
	if !current {
		return // replaced (by a better one) or ended meanwhile
	}
	err := p.tryPaused(pt)
	if err == nil {
		return
	}
	p.mu.Lock()
	if p.paused == pt {
		pt.probes++
		pt.lastErr = err.Error()
		pt.wait = min(2*pt.wait, cmp.Or(e.fb.max, probeMax))
		pt.next = time.Now().Add(pt.wait)
	}
	p.mu.Unlock()
	e.log.Debug("probe of a paused transport failed", "peer", p, "transport", pt.name, "next_in", pt.wait, "reason", err)
}

// errBusy: a reconnection was under way; the probe is tried again later.
var errBusy = errors.New("the peer was reconnecting")

// tryPaused dials the peer offering pt's transport alone and, when that
// connects, makes it the peer's connection.
func (p *Peer) tryPaused(pt *pauseState) error {
	e := p.e
	p.mu.Lock()
	busy := p.dialing != nil
	p.mu.Unlock()
	if busy {
		return errBusy
	}
	// The revokes made from here on are replayed to the new connection.
	e.mu.Lock()
	mark := e.revSeq
	e.mu.Unlock()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go func() { // a peer that closes ends its probe
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	nep, _, err := e.connectOnce(ctx, p, nil, pt.name)
	if err != nil {
		return err
	}
	// Take the peer's dial slot, so that no reconnection runs while the
	// connection is swapped; endpoint's callers wait on it, or keep
	// posting on the connection they have.
	p.mu.Lock()
	if p.closed || p.dialing != nil || p.paused != pt {
		closed := p.closed
		p.mu.Unlock()
		nep.Close()
		p.tokens.Delete(nep)
		if closed {
			return fmt.Errorf("peer %s: %w", p, ErrClosed)
		}
		return errBusy
	}
	ch := make(chan struct{})
	p.dialing = ch
	p.paused = nil
	p.movedBack = moveBack{time.Now(), pt.wait}
	probes := pt.probes
	p.mu.Unlock()
	old := p.current()
	if old != nil {
		p.startDraining(old)
	}
	p.mark.Store(mark)
	p.setEndpoint(nep)
	p.watch(nep)
	p.mu.Lock()
	p.dialing = nil
	close(ch)
	p.mu.Unlock()
	from := ""
	if old != nil {
		from = old.Transport()
		p.retire(old)
	}
	p.recovered(from, pt.name, probes+1, time.Since(pt.since))
	return nil
}

// recovered counts, records and logs the move of the peer from transport
// from back to to, its paused transport, after probes probes.
func (p *Peer) recovered(from, to string, probes int, paused time.Duration) {
	e := p.e
	e.stats.recordFailover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Attempts: probes, Reason: metrics.ReasonRecovered})
	if m := e.metrics; m != nil {
		m.FailedOver(from, to, metrics.ReasonRecovered)
	}
	e.log.Info("paused transport answered a probe; the peer is back on it", "peer", p, "from", from, "to", to, "probes", probes, "paused_for", paused.Round(time.Millisecond))
}

// pausedStatus is the peer's paused transports, for PeerStatus.
func (p *Peer) pausedStatus() []PausedTransport {
	p.mu.Lock()
	defer p.mu.Unlock()
	pt := p.paused
	if pt == nil {
		return nil
	}
	return []PausedTransport{{Transport: pt.name, Reason: pt.reason, Since: pt.since.UTC(), NextProbe: pt.next.UTC(), Probes: pt.probes, LastError: pt.lastErr}}
}

// failoverHook is what a connection of p's calls when its own data path
// failed and it carries on over its control connection, without a new
// handshake (transport.Params.OnFailover): nil unless the peer's policy
// is auto. The same peer carries on, on both sides.
func (p *Peer) failoverHook(policy Policy) func(from, to string, cause error) {
	if policy != PolicyAuto {
		return nil
	}
	return func(from, to string, cause error) { go p.pathMoved(from, to, cause) }
}

// pathMoved counts, records and logs (at Warn once per peer) the move of
// p's connection from transport from to to; a peer this engine dialed
// pauses from and probes it, to move back when it works (see above).
func (p *Peer) pathMoved(from, to string, cause error) {
	e := p.e
	e.stats.recordFailover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Attempts: 1, Reason: metrics.ReasonPathFailed})
	if m := e.metrics; m != nil {
		m.FailedOver(from, to, metrics.ReasonPathFailed)
		// The connection's counters from now on are the new transport's.
		if b := p.ep.Load(); b != nil {
			nb := &epBox{ep: b.ep, conn: m.NewConn(b.ep, p.stats.Conn())}
			p.stats.Publish(nb.conn)
			p.ep.CompareAndSwap(b, nb)
		}
	}
	e.stats.warnOnce(e.log, p.String(), "failover "+from+" to "+to, "the connection's "+from+" path failed; it carries on over its control connection, without a new handshake",
		"from", from, "to", to, "reason", cause)
	if p.dialAddr != "" && p.policy == PolicyAuto {
		p.pause(from, to, cause.Error())
	}
}
