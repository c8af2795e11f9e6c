package xfer

import (
	"fmt"

	"github.com/xferio/xfer/transport"
)

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

// probe posts a probe to the peer's endpoint in box, unless one is out.
func (p *Peer) probe(box *epBox) {
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
		lr, err := p.e.regions.pinLocal(local)
		if err != nil {
			return
		}
		defer lr.Unpin()
		o := &probeOp{done: make(chan struct{})}
		op := &transport.Op{Kind: OpRead, Local: local, Remote: RemoteAddr{}, Region: lr, Done: o}
		// Post may wait (rdma looks the region up over the control
		// connection): not in the watchdog's goroutine. The op ends when
		// the peer answers or the connection closes.
		box.ep.Post([]*transport.Op{op}, false)
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
