package xfer

import (
	"errors"
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/watchdog"
	"github.com/xferio/xfer/transport"
)

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

// watchdog runs the op_timeout watchdog (internal/watchdog) over the
// engine's peers until the engine closes: a peer that has had operations
// outstanding and made no progress for Config.OpTimeout
// (transport.Progresser) has its connection closed.
func (e *Engine) watchdog() {
	defer e.wg.Done()
	watchdog.Run(e.ctx, e.cfg.OpTimeout, func(yield func(watchdog.Peer) bool) {
		for _, p := range e.Peers() {
			if !yield((*watchedPeer)(p)) {
				return
			}
		}
	})
}

// watchedPeer is a Peer as the watchdog sees it (watchdog.Peer), without
// those methods on Peer itself. Its connections are the peer's endpoints.
type watchedPeer Peer

// Conn returns the peer's endpoint, if it can tell its progress.
func (w *watchedPeer) Conn() watchdog.Conn {
	box := w.ep.Load()
	if box == nil {
		return nil
	}
	pr, _ := box.ep.(transport.Progresser)
	return pr
}

// Waiting reports goroutines in Recv or Peer.WaitNotify, or in
// Engine.WaitNotify while the peer has no notify handler.
func (w *watchedPeer) Waiting() bool {
	return w.waiters.Load() > 0 || w.e.notes.Waiting() && w.notify.Load() == nil
}

func (w *watchedPeer) Probing() bool { return w.probing.Load() }

func (w *watchedPeer) Probe(c watchdog.Conn) { (*Peer)(w).probe(c.(transport.Endpoint)) }

// Stalled records the stall, so that the operations the close fails
// report a *StallError, and closes the endpoint.
func (w *watchedPeer) Stalled(c watchdog.Conn, timeout time.Duration, pending int) {
	p, ep := (*Peer)(w), c.(transport.Endpoint)
	p.stall.Store(&stallRec{ep: ep, timeout: timeout, pending: pending})
	p.e.log.Warn("peer made no progress; closing its connection", "peer", p, "op_timeout", timeout, "outstanding", pending,
		"transport", ep.Transport())
	if m := p.e.metrics; m != nil {
		m.Stalled(ep.Transport())
	}
	// Close fails what is outstanding and waits for the endpoint's
	// goroutines, which may take a while on a stalled peer: not in the
	// watchdog's goroutine. (The watchdog holds a count of e.wg, so Add
	// is safe even while Engine.Close waits.)
	p.e.wg.Add(1)
	go func() {
		defer p.e.wg.Done()
		ep.Close()
	}()
}

// Probes: a goroutine waiting for a peer to send (Recv, Peer.WaitNotify,
// and Engine.WaitNotify for every peer without a notify handler) must
// learn that the peer stalled, but an idle peer that is alive is no
// failure. So when such a peer has been quiet for half of
// Config.OpTimeout, the watchdog asks it something it must answer: a
// one-byte READ of region 0, which no engine has (region IDs start at 1),
// answered at once with an unknown-region error by a live peer (over rdma
// too: the region is looked up over the control connection, by the peer's
// process, before any work reaches the NIC). The answer is progress; a
// peer that gives none within OpTimeout has its connection closed, as for
// any operation, and the waiters fail with a *StallError.

// probeOp is the completion of a probe.
type probeOp struct{ done chan struct{} }

func (o *probeOp) OpDone(*transport.Op) { close(o.done) }

// probe posts a probe to the peer's endpoint ep, unless one is out.
func (p *Peer) probe(ep transport.Endpoint) {
	if !p.probing.CompareAndSwap(false, true) {
		return
	}
	buf, err := p.e.Alloc(1)
	if err != nil {
		p.probing.Store(false) // no memory to probe from: not now
		return
	}
	p.e.wg.Add(1) // the watchdog holds a count of e.wg: safe during Close
	go func() {
		defer p.e.wg.Done()
		defer p.probing.Store(false)
		defer p.e.Free(buf)
		local := buf.Bytes()[:1]
		lr, err := p.e.pinLocal(local)
		if err != nil {
			return
		}
		defer lr.Unpin()
		o := &probeOp{done: make(chan struct{})}
		op := &transport.Op{Kind: OpRead, Local: local, Remote: RemoteAddr{}, Region: lr, Done: o}
		// Post may wait (rdma looks the region up over the control
		// connection): not in the watchdog's goroutine. The op ends when
		// the peer answers or the connection closes.
		ep.Post([]*transport.Op{op}, false)
		<-o.done
		p.e.log.Debug("probed a quiet peer with waiters", "peer", p, "answer", fmt.Sprint(op.Err))
	}()
}

// waitEnded is the error of a wait for peer p (Recv, WaitNotify) whose
// connection ep failed: a *StallError when the watchdog closed it.
func (p *Peer) waitEnded(op string, ep transport.Endpoint) error {
	err := ep.Err()
	if r := p.stall.Load(); r != nil && r.ep == ep {
		return &StallError{Op: op, Peer: p.String(), Timeout: r.timeout, Pending: r.pending, Cause: err}
	}
	return fmt.Errorf("%s from %s: %w", op, p, err)
}
