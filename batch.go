package xfer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Batches: operations submitted together and waited for together.

// Op is one operation of a batch. Local must lie in registered memory and
// must not be touched until the batch is done. Err is set when it completes.
type Op struct {
	Kind   OpKind
	Local  []byte
	Remote RemoteAddr // unused by OpSend
	Value  uint32     // the notification value of OpWriteNotify
	Err    error
}

// Submit posts a batch of operations and returns at once. The batch owns
// ops until it is done: Batch.Wait, then read each ops[i].Err.
//
// A batch of only READs and WRITEs to a peer this engine dialed is safe to
// repeat, as Peer.Write and Peer.Read are: when its connection is lost
// (not stalled), the operations that did not complete are posted again,
// in their order, on a new connection, up to three times, each counted as
// a failover (Status, the failover metric); those that completed are not.
// A batch with a write-with-notify or a SEND is not repeated: its lost
// operations fail with ErrPeerLost, as the peer may have had them.
//
// A batch of one operation is taken for a call that is waited for at once:
// over rdma, Submit then polls for its completion for up to a millisecond
// before it returns. SubmitInto never does.
func (p *Peer) Submit(ops []Op) *Batch {
	b := new(Batch)
	p.submit(b, ops, len(ops) == 1)
	return b
}

// SubmitInto is Submit into a Batch the caller keeps and reuses: b is a
// zero Batch, or one whose operations are all done (Done reports true, or
// Wait has returned). A Batch that has held n operations posts n or fewer
// again without allocating, so that a caller that keeps some batches in
// flight (a pipeline) allocates nothing per submission. b must not be
// waited on by anyone while SubmitInto runs. SubmitInto returns as soon
// as the operations are posted, on every transport.
func (p *Peer) SubmitInto(b *Batch, ops []Op) { p.submit(b, ops, false) }

// submit posts ops as batch b; waited marks them as waited for at once.
func (p *Peer) submit(b *Batch, ops []Op, waited bool) {
	b.reset(len(ops))
	b.ops = ops
	if len(ops) == 0 {
		b.finish()
		return
	}
	b.peer = p
	b.repeat = p.dialAddr != ""
	for i := range ops {
		if k := ops[i].Kind; k != OpRead && k != OpWrite {
			b.repeat = false
		}
	}
	box, err := p.endpoint(context.Background())
	var ep transport.Endpoint
	if err == nil {
		ep = box.ep
	}
	if err == nil && box.conn != nil {
		b.p, b.conn = p, box.conn
		for range ops {
			if b.start.IsZero() {
				b.start = metrics.SampleStart(box.conn.Every())
			}
		}
	}
	for i := range ops {
		t := &b.tops[i]
		*t = transport.Op{Kind: ops[i].Kind, Local: ops[i].Local, Remote: ops[i].Remote, Imm: ops[i].Value, Done: b, Tag: i}
		if err != nil {
			t.Err = err
			b.OpDone(t)
			continue
		}
		r, lerr := p.e.pinLocal(ops[i].Local)
		if lerr != nil {
			t.Err = fmt.Errorf("op %d (%s): %w", i, ops[i].Kind, p.e.closedOr(lerr))
			if b.p != nil {
				b.conn.Ops[metrics.OpOf(t.Kind)].Add(1) // never posted
			}
			b.OpDone(t)
			continue
		}
		b.pins[i] = r
		t.Region = r
		if b.p != nil {
			b.conn.Posted(metrics.OpOf(t.Kind)) // unless the endpoint counts its own
		}
		if p.e.staging(ep, t) {
			b.ep = ep
			p.e.postStaged(ep, t)
			continue
		}
		b.ptrs = append(b.ptrs, t)
	}
	if len(b.ptrs) > 0 {
		b.ep = ep
		ep.Post(b.ptrs, waited)
	}
}

// Batch is a submitted group of operations.
type Batch struct {
	ops       []Op
	tops      []transport.Op
	pins      []*mem.Handle // local regions pinned while their op runs
	ptrs      []*transport.Op
	ep        transport.Endpoint
	remaining atomic.Int64
	peer      *Peer         // the peer it was submitted to
	p         *Peer         // set when the engine has metrics
	conn      *metrics.Conn // the connection's counters, for the metrics
	start     time.Time     // when it was submitted, for the metrics (zero: not timed)
	errOnce   sync.Once
	first     error
	// done holds one token once every operation has completed. A waiter
	// takes it and puts it back, so that any number of Waits return; a
	// resubmission takes it for good.
	done   chan struct{}
	posted bool // a submission's token is yet to be taken by reset
	// holds, set by a Wait that gave up (its ctx ended) on operations the
	// transport could not take back, keep their bytes in the engine's
	// pool from being handed out again (mem.Pool.Hold) until the last of
	// them completes; amu orders that against the last OpDone.
	amu   sync.Mutex
	holds []func()
	// Failover: repeat is set for a batch that is safe to repeat (see
	// Submit); inflight counts its operations posted on the current
	// connection and not yet ended. rmu guards ep once posted, redo (the
	// lost operations, to be posted again once inflight reaches zero),
	// tries (failovers so far), lost (each operation's first loss; nil
	// until one is lost) and stopped (a Wait gave up: no more repeats).
	repeat   bool
	inflight atomic.Int64
	rmu      sync.Mutex
	redo     []*transport.Op
	tries    int
	lost     []error
	stopped  bool
	// Storage of a batch of one operation.
	top1 [1]transport.Op
	pin1 [1]*mem.Handle
	ptr1 [1]*transport.Op
}

// reset readies b for a submission of n operations, reusing its storage.
func (b *Batch) reset(n int) {
	if b.done == nil {
		b.done = make(chan struct{}, 1)
	} else if b.posted {
		<-b.done // the previous submission's token: it is done, or about to be
	}
	b.posted = true
	switch {
	case n <= 1:
		// A single operation (a message, a synchronous call) uses the
		// batch's own storage: no allocation beyond the batch.
		b.tops, b.pins, b.ptrs = b.top1[:n], b.pin1[:n], b.ptr1[:0]
	case cap(b.tops) >= n:
		b.tops, b.pins, b.ptrs = b.tops[:n], b.pins[:n], b.ptrs[:0]
	default:
		b.tops, b.pins, b.ptrs = make([]transport.Op, n), make([]*mem.Handle, n), make([]*transport.Op, 0, n)
	}
	b.ep, b.first, b.errOnce = nil, nil, sync.Once{}
	b.peer, b.p, b.conn, b.start = nil, nil, nil, time.Time{}
	b.repeat, b.redo, b.tries, b.lost, b.stopped = false, nil, 0, nil, false
	b.inflight.Store(int64(n))
	b.remaining.Store(int64(n))
}

// finish hands out the token that says every operation is done.
func (b *Batch) finish() { b.done <- struct{}{} }

// OpDone implements transport.Completer.
func (b *Batch) OpDone(t *transport.Op) {
	if t.Err != nil && b.peer != nil {
		t.Err = b.peer.stalled(b.ep, t.Kind, t.Err)
	}
	if b.repeat {
		if t.Err != nil && b.keepLost(t) {
			return
		}
		if b.inflight.Add(-1) == 0 {
			b.rmu.Lock()
			again := len(b.redo) > 0
			b.rmu.Unlock()
			if again {
				go b.failover()
			}
		}
	}
	b.complete(t)
}

// keepLost keeps t, which failed, to be posted again on a new connection
// when its connection was lost and the batch may be repeated once more;
// the last of the connection's operations to end starts the failover.
func (b *Batch) keepLost(t *transport.Op) bool {
	p := b.peer
	b.rmu.Lock()
	if b.stopped || b.tries >= maxFailovers || !p.repeatable(context.Background(), t.Kind, t.Err) {
		b.rmu.Unlock()
		return false
	}
	if b.p != nil {
		b.p.opDone(b.conn, metrics.OpOf(t.Kind), len(t.Local), time.Time{}, t.Err)
	}
	if b.lost == nil {
		b.lost = make([]error, len(b.tops))
	}
	if b.lost[t.Tag] == nil {
		b.lost[t.Tag] = t.Err
	}
	b.redo = append(b.redo, t)
	last := b.inflight.Add(-1) == 0
	b.rmu.Unlock()
	if last {
		go b.failover()
	}
	return true
}

// failover posts the batch's lost operations again, in their order, on a
// new connection (Peer.endpoint dials again); when none can be made, they
// fail.
func (b *Batch) failover() {
	p := b.peer
	b.rmu.Lock()
	b.tries++
	attempt := b.tries
	from := ""
	if b.ep != nil {
		from = b.ep.Transport()
	}
	b.rmu.Unlock()
	p.e.log.Debug("connection lost under a batch; posting its lost operations again on a new connection", "peer", p, "transport", from)
	box, err := p.endpoint(p.e.ctx)
	b.rmu.Lock()
	ops := b.redo // a Wait that gave up may have taken them
	b.redo = nil
	if err == nil && len(ops) > 0 {
		b.ep = box.ep
		if b.p != nil {
			b.conn = box.conn
		}
		b.inflight.Add(int64(len(ops)))
	}
	b.rmu.Unlock()
	if len(ops) == 0 {
		return
	}
	if err != nil {
		for _, t := range ops {
			t.Err = err
			b.complete(t)
		}
		return
	}
	slices.SortFunc(ops, func(x, y *transport.Op) int { return x.Tag - y.Tag })
	ptrs := make([]*transport.Op, 0, len(ops))
	for _, t := range ops {
		t.Err = nil
		if b.p != nil {
			b.conn.Posted(metrics.OpOf(t.Kind))
		}
		if p.e.staging(box.ep, t) {
			p.e.postStaged(box.ep, t)
			continue
		}
		ptrs = append(ptrs, t)
	}
	p.failedOver(from, box.ep.Transport(), ops[0].Kind, attempt)
	if len(ptrs) > 0 {
		box.ep.Post(ptrs, false)
	}
}

// complete records t's end: it is done, with or without an error.
func (b *Batch) complete(t *transport.Op) {
	if t.Err != nil && b.repeat {
		b.rmu.Lock()
		if b.lost != nil && b.lost[t.Tag] != nil {
			t.Err = fmt.Errorf("%w; posted again on a new connection (%d attempts): %w", b.lost[t.Tag], b.tries+1, t.Err)
		}
		b.rmu.Unlock()
	}
	b.ops[t.Tag].Err = t.Err
	if b.p != nil {
		b.p.opDone(b.conn, metrics.OpOf(t.Kind), len(t.Local), b.start, t.Err)
	}
	if r := b.pins[t.Tag]; r != nil {
		b.pins[t.Tag] = nil
		r.Unpin()
	}
	if t.Err != nil {
		b.errOnce.Do(func() { b.first = t.Err })
	}
	if b.remaining.Add(-1) == 0 {
		b.amu.Lock()
		holds := b.holds
		b.holds = nil
		b.amu.Unlock()
		for _, release := range holds {
			release()
		}
		b.finish()
	}
}

// Done reports, without waiting, whether every operation has completed.
func (b *Batch) Done() bool { return b.remaining.Load() == 0 }

// Wait waits for every operation and returns the first error (each
// operation's own is in its Err). When ctx ends first, operations not yet
// complete are cancelled where the transport can, and Wait returns at
// once: with the batch's first error when every operation has ended, or
// else with ctx's error, abandoning the operations the transport could
// not take back, as Peer.Write does. They go on without the caller until
// they complete or their connection fails (Config.OpTimeout bounds that);
// until then the batch keeps their memory registered and their bytes in
// the engine's pool from being handed out again, the operations (ops[i],
// their Err included) still belong to the batch (Done reports false), and
// a SubmitInto of it waits for them.
func (b *Batch) Wait(ctx context.Context) error {
	if b.remaining.Load() == 0 {
		return b.first // done: no need to touch the token
	}
	b.rmu.Lock()
	ep := b.ep
	b.rmu.Unlock()
	if p, ok := ep.(transport.Poller); ok {
		p.PollUntil(b) // rdma: find the completions here, not by a wake-up
	}
	select {
	case <-b.done:
		b.done <- struct{}{}
		return b.first
	case <-ctx.Done():
	}
	// No more repeats; lost operations not posted again end here.
	b.rmu.Lock()
	b.stopped = true
	ep, redo := b.ep, b.redo
	b.redo = nil
	b.rmu.Unlock()
	for _, t := range redo {
		t.Err = fmt.Errorf("%s: %w", t.Kind, ctx.Err())
		b.complete(t)
	}
	for i := range b.tops {
		t := &b.tops[i]
		if ep != nil && ep.Cancel(t) {
			t.Err = fmt.Errorf("%s: %w", t.Kind, ctx.Err())
			b.OpDone(t)
		}
	}
	b.amu.Lock()
	if b.remaining.Load() == 0 {
		b.amu.Unlock()
		<-b.done
		b.done <- struct{}{}
		return b.first
	}
	// Abandoned: hold every operation's bytes (those done as well: they
	// are released together, once the last completes).
	if b.peer != nil {
		for i := range b.ops {
			release, ok := b.peer.e.pool.Hold(b.ops[i].Local)
			if ok {
				b.holds = append(b.holds, release)
			}
		}
	}
	b.amu.Unlock()
	return fmt.Errorf("batch: %w (abandoned: the transport still owns some of its buffers; see Batch.Wait)", ctx.Err())
}
