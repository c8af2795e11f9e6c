package xfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/failback"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/transport"
)

// Failback (internal/failback keeps the pause and probes): a dialed peer that lost a better transport (by the auto
// policy's order) and reconnected on a lesser one keeps the better one
// paused, with the reason, and probes it with backoff: a handshake that
// offers the paused transport alone. When a probe connects, the new
// connection becomes the peer's, and the lesser one is closed once the
// operations posted on it have ended. A peer this engine accepted follows:
// the dialer's probe names the Welcome token of the connection it replaces
// (wire.CapResume), and the acceptor puts the new connection under that
// connection's peer, which Accept returned once and does not return again.

// available is t.Available, unless a test refuses t.
func (e *Engine) available(t transport.Transport) error {
	if f := e.fb.refuse; f != nil {
		if err := f(t.Name()); err != nil {
			return err
		}
	}
	return t.Available()
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
	p.fb.Reconnected(p.e.fbConfig(), now)
}

// fbConfig is the failback's backoff (a test's, or the defaults) and the
// table's order of the transports.
func (e *Engine) fbConfig() *failback.Config {
	return &failback.Config{First: e.fb.first, Max: e.fb.max, Rank: rank}
}

// pause pauses transport name, which the peer left for now, and starts the
// prober unless it runs.
func (p *Peer) pause(name, now, reason string) {
	e := p.e
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	wait, start, ok := p.fb.Pause(e.fbConfig(), name, reason)
	if !ok {
		return // already probing one as good
	}
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
	go func() {
		defer e.wg.Done()
		p.fb.Run(e.ctx, p.done, e.fbConfig(), (*probedPeer)(p))
	}()
}

// probedPeer is a Peer as its failback sees it (failback.Prober), without
// those methods on Peer itself.
type probedPeer Peer

func (pp *probedPeer) Try(pt *failback.Pause) error { return (*Peer)(pp).tryPaused(pt) }

func (pp *probedPeer) Failed(pt *failback.Pause, wait time.Duration, err error) {
	pp.e.log.Debug("probe of a paused transport failed", "peer", (*Peer)(pp), "transport", pt.Name, "next_in", wait, "reason", err)
}

// errBusy: a reconnection was under way; the probe is tried again later.
var errBusy = errors.New("the peer was reconnecting")

// tryPaused dials the peer offering pt's transport alone and, when that
// connects, makes it the peer's connection.
func (p *Peer) tryPaused(pt *failback.Pause) error {
	e := p.e
	p.mu.Lock()
	busy := p.dialing != nil
	p.mu.Unlock()
	if busy {
		return errBusy
	}
	// The revokes made from here on are replayed to the new connection.
	e.mu.Lock()
	mark := e.revokes.Seq()
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
	nep, _, err := e.connectOnce(ctx, p, nil, pt.Name)
	if err != nil {
		return err
	}
	// Take the peer's dial slot, so that no reconnection runs while the
	// connection is swapped; endpoint's callers wait on it, or keep
	// posting on the connection they have.
	p.mu.Lock()
	if p.closed || p.dialing != nil || !p.fb.Claim(pt) {
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
	p.recovered(from, pt.Name, pt.Probes+1, time.Since(pt.Since))
	return nil
}

// recovered counts, records and logs the move of the peer from transport
// from back to to, its paused transport, after probes probes.
func (p *Peer) recovered(from, to string, probes int, paused time.Duration) {
	e := p.e
	e.stats.Failover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Attempts: probes, Reason: metrics.ReasonRecovered})
	if m := e.metrics; m != nil {
		m.FailedOver(from, to, metrics.ReasonRecovered)
	}
	e.log.Info("paused transport answered a probe; the peer is back on it", "peer", p, "from", from, "to", to, "probes", probes, "paused_for", paused.Round(time.Millisecond))
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
	e.stats.Failover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Attempts: 1, Reason: metrics.ReasonPathFailed})
	if m := e.metrics; m != nil {
		m.FailedOver(from, to, metrics.ReasonPathFailed)
		// The connection's counters from now on are the new transport's.
		if b := p.ep.Load(); b != nil {
			nb := &epBox{ep: b.ep, conn: m.NewConn(b.ep, p.stats.Conn())}
			p.stats.Publish(nb.conn)
			p.ep.CompareAndSwap(b, nb)
		}
	}
	e.stats.WarnOnce(e.log, p.String(), "failover "+from+" to "+to, "the connection's "+from+" path failed; it carries on over its control connection, without a new handshake",
		"from", from, "to", to, "reason", cause)
	if p.dialAddr != "" && p.policy == PolicyAuto {
		p.pause(from, to, cause.Error())
	}
}
