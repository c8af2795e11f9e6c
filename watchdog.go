package xfer

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/xferio/xfer/transport"
)

// StallError is the error of an operation whose peer made no progress for
// Config.OpTimeout while operations were outstanding with it: the engine
// closed the peer's connection so that every one of them ended. It matches
// ErrStalled and os.ErrDeadlineExceeded (a timeout), and, as any operation
// on a lost connection, ErrPeerLost and ErrClosed through Cause.
type StallError struct {
	Op      string        // the operation: "write", "read", "write_imm", "send"
	Peer    string        // the peer's address, or its engine ID
	Timeout time.Duration // Config.OpTimeout
	Pending int           // the operations outstanding when it was declared stalled
	Cause   error         // how the operation itself failed when the connection closed
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s to %s: the peer made no progress for %v (op_timeout) with %d operations outstanding, so its connection was closed: %v",
		e.Op, e.Peer, e.Timeout, e.Pending, e.Cause)
}

// Is matches ErrStalled and os.ErrDeadlineExceeded.
func (e *StallError) Is(target error) bool {
	return target == ErrStalled || target == os.ErrDeadlineExceeded
}

// Unwrap returns the operation's own error.
func (e *StallError) Unwrap() error { return e.Cause }

// stallRec records that the watchdog closed ep because its peer stalled.
type stallRec struct {
	ep      transport.Endpoint
	timeout time.Duration
	pending int
}

// stalled turns err, the failure of an operation of kind posted on ep,
// into a StallError when the watchdog closed ep for a stall. Only failed
// operations call it.
func (p *Peer) stalled(ep transport.Endpoint, kind OpKind, err error) error {
	r := p.stall.Load()
	if r == nil || r.ep != ep || err == nil || errors.Is(err, ErrStalled) {
		return err
	}
	return &StallError{Op: kind.String(), Peer: p.String(), Timeout: r.timeout, Pending: r.pending, Cause: err}
}

// watchdogState is what the watchdog remembers of a peer between looks;
// only the watchdog's goroutine touches it.
type watchdogState struct {
	ep    transport.Endpoint
	moved uint64
	since time.Time // when moved last changed, or operations began to wait
}

// watchdog looks at every peer eight times per Config.OpTimeout, and closes
// the connection of a peer that has had operations outstanding and made no
// progress for OpTimeout (transport.Progresser). It runs until the engine
// closes.
func (e *Engine) watchdog() {
	defer e.wg.Done()
	timeout := e.cfg.OpTimeout
	tick := time.NewTicker(timeout / 8)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case now := <-tick.C:
			for _, p := range e.Peers() {
				p.look(now, timeout)
			}
		}
	}
}

// look is one look of the watchdog at p.
func (p *Peer) look(now time.Time, timeout time.Duration) {
	w := &p.wd
	box := p.ep.Load()
	if box == nil {
		w.ep = nil
		return
	}
	pr, ok := box.ep.(transport.Progresser)
	if !ok {
		return // an endpoint that cannot tell: not watched
	}
	moved, pending := pr.Progress()
	waiting := p.waiters.Load() > 0 || p.e.notes.waiting.Load() > 0 && p.notify.Load() == nil
	if box.ep != w.ep || pending == 0 && !waiting || moved != w.moved {
		w.ep, w.moved, w.since = box.ep, moved, now
		return
	}
	if pending == 0 && p.probing.Load() {
		pending = 1 // the probe is outstanding, whatever the transport counts
	}
	if pending == 0 {
		// Only waiters, and a quiet peer: an idle peer is no failure,
		// but one that does not answer a probe either is stalled.
		if now.Sub(w.since) >= timeout/2 {
			p.probe(box)
		}
		return
	}
	if now.Sub(w.since) < timeout {
		return
	}
	w.since = now
	p.stall.Store(&stallRec{ep: box.ep, timeout: timeout, pending: pending})
	p.e.log.Warn("peer made no progress; closing its connection", "peer", p, "op_timeout", timeout, "outstanding", pending,
		"transport", box.ep.Transport())
	if m := p.e.metrics; m != nil {
		m.stalls.WithLabelValues(box.ep.Transport()).Inc()
	}
	// Close fails what is outstanding and waits for the endpoint's
	// goroutines, which may take a while on a stalled peer: not in the
	// watchdog's goroutine. (The watchdog holds a count of e.wg, so Add
	// is safe even while Engine.Close waits.)
	p.e.wg.Add(1)
	go func() {
		defer p.e.wg.Done()
		box.ep.Close()
	}()
}
