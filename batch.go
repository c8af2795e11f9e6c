package xfer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	box, err := p.endpoint(context.Background())
	var ep transport.Endpoint
	if err == nil {
		ep = box.ep
	}
	if err == nil && box.conn != nil {
		b.p, b.conn = p, box.conn
		for range ops {
			if b.start.IsZero() {
				b.start = sampleStart(box.conn.every)
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
		r, lerr := p.e.regions.pinLocal(ops[i].Local)
		if lerr != nil {
			t.Err = fmt.Errorf("op %d (%s): %w", i, ops[i].Kind, p.e.closedOr(lerr))
			if b.p != nil {
				b.conn.ops[opIndex(t.Kind)].Add(1) // never posted
			}
			b.OpDone(t)
			continue
		}
		b.pins[i] = r
		t.Region = r
		if b.p != nil && b.conn.counter == nil {
			b.conn.ops[opIndex(t.Kind)].Add(1) // an endpoint that does not count its own
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
	peer      *Peer      // the peer it was submitted to
	p         *Peer      // set when the engine has metrics
	conn      *connStats // the connection's counters, for the metrics
	start     time.Time  // when it was submitted, for the metrics (zero: not timed)
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
	b.remaining.Store(int64(n))
}

// finish hands out the token that says every operation is done.
func (b *Batch) finish() { b.done <- struct{}{} }

// OpDone implements transport.Completer.
func (b *Batch) OpDone(t *transport.Op) {
	if t.Err != nil && b.peer != nil {
		t.Err = b.peer.stalled(b.ep, t.Kind, t.Err)
	}
	b.ops[t.Tag].Err = t.Err
	if b.p != nil {
		b.p.opDone(b.conn, opIndex(t.Kind), len(t.Local), b.start, t.Err)
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
	if p, ok := b.ep.(transport.Poller); ok {
		p.PollUntil(b) // rdma: find the completions here, not by a wake-up
	}
	select {
	case <-b.done:
		b.done <- struct{}{}
		return b.first
	case <-ctx.Done():
	}
	for i := range b.tops {
		t := &b.tops[i]
		if b.ep != nil && b.ep.Cancel(t) {
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
