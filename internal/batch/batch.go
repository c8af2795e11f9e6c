package batch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// MaxFailovers is how many times an operation that is safe to repeat is
// repeated after its connection was lost.
const MaxFailovers = 3

// Peer is what a batch needs of the peer it is submitted to.
type Peer interface {
	fmt.Stringer
	// Endpoint returns the peer's connection, dialing it when it has none
	// (within ctx), and its counters (nil without metrics).
	Endpoint(ctx context.Context) (transport.Endpoint, *metrics.Conn, error)
	// Context ends when the engine closes.
	Context() context.Context
	// Pin pins the registered memory local lies in.
	Pin(local []byte) (*mem.Handle, error)
	// Staging reports whether op must be staged through host memory: ep
	// cannot move its local memory itself.
	Staging(ep transport.Endpoint, op *transport.Op) bool
	// PostStaged posts op on ep through host memory.
	PostStaged(ep transport.Endpoint, op *transport.Op)
	// Stalled turns err, the failure of an operation of kind posted on
	// ep, into the peer's stall error when the peer stalled.
	Stalled(ep transport.Endpoint, kind transport.OpKind, err error) error
	// Repeatable reports whether an operation of kind that failed with
	// err may be posted again on a new connection.
	Repeatable(kind transport.OpKind, err error) bool
	// OpDone records the end of an operation of n bytes on connection c
	// (nil without metrics), timed from start (zero: not timed).
	OpDone(c *metrics.Conn, op metrics.Op, n int, start time.Time, err error)
	// FailedOver records that operations of kind moved from transport
	// from to transport to after attempts posts.
	FailedOver(from, to string, kind transport.OpKind, attempts int)
	// Hold keeps the pool's bytes b from being handed out again until
	// release is called; false when b is not the pool's.
	Hold(b []byte) (release func(), ok bool)
	Logger() *slog.Logger
}

// Batch is a submitted group of operations.
type Batch struct {
	// SetErr records operation i's end (its error, or nil) where its
	// submitter reads it; set once, before the first Reset.
	SetErr    func(i int, err error)
	tops      []transport.Op
	pins      []*mem.Handle // local regions pinned while their op runs
	ptrs      []*transport.Op
	ep        transport.Endpoint
	remaining atomic.Int64
	peer      Peer          // the peer it was submitted to
	metered   bool          // set when the engine has metrics
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
	// Post); inflight counts its operations posted on the current
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

// Reset readies b for a submission of n operations, reusing its storage,
// and returns the operations to fill in: each with its Kind, Local,
// Remote and Imm; Reset sets Done and Tag.
func (b *Batch) Reset(n int) []transport.Op {
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
	b.peer, b.metered, b.conn, b.start = nil, false, nil, time.Time{}
	b.repeat, b.redo, b.tries, b.lost, b.stopped = false, nil, 0, nil, false
	b.inflight.Store(int64(n))
	b.remaining.Store(int64(n))
	return b.tops
}

// Post posts the operations Reset returned to p; repeat marks the batch
// as safe to repeat on a new connection, waited as waited for at once.
func (b *Batch) Post(p Peer, repeat, waited bool) {
	if len(b.tops) == 0 {
		b.finish()
		return
	}
	b.peer = p
	b.repeat = repeat
	ep, conn, err := p.Endpoint(context.Background())
	if err == nil && conn != nil {
		b.metered, b.conn = true, conn
		for range b.tops {
			if b.start.IsZero() {
				b.start = metrics.SampleStart(conn.Every())
			}
		}
	}
	for i := range b.tops {
		t := &b.tops[i]
		t.Done, t.Tag = b, i
		if err != nil {
			t.Err = err
			b.OpDone(t)
			continue
		}
		r, lerr := p.Pin(t.Local)
		if lerr != nil {
			t.Err = fmt.Errorf("op %d (%s): %w", i, t.Kind, lerr)
			if b.metered {
				b.conn.Ops[metrics.OpOf(t.Kind)].Add(1) // never posted
			}
			b.OpDone(t)
			continue
		}
		b.pins[i] = r
		t.Region = r
		if b.metered {
			b.conn.Posted(metrics.OpOf(t.Kind)) // unless the endpoint counts its own
		}
		if p.Staging(ep, t) {
			b.ep = ep
			p.PostStaged(ep, t)
			continue
		}
		b.ptrs = append(b.ptrs, t)
	}
	if len(b.ptrs) > 0 {
		b.ep = ep
		ep.Post(b.ptrs, waited)
	}
}

// finish hands out the token that says every operation is done.
func (b *Batch) finish() { b.done <- struct{}{} }

// OpDone implements transport.Completer.
func (b *Batch) OpDone(t *transport.Op) {
	if t.Err != nil && b.peer != nil {
		t.Err = b.peer.Stalled(b.ep, t.Kind, t.Err)
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
	if b.stopped || b.tries >= MaxFailovers || !p.Repeatable(t.Kind, t.Err) {
		b.rmu.Unlock()
		return false
	}
	if b.metered {
		p.OpDone(b.conn, metrics.OpOf(t.Kind), len(t.Local), time.Time{}, t.Err)
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
// new connection (Peer.Endpoint dials again); when none can be made, they
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
	p.Logger().Debug("connection lost under a batch; posting its lost operations again on a new connection", "peer", p, "transport", from)
	ep, conn, err := p.Endpoint(p.Context())
	b.rmu.Lock()
	ops := b.redo // a Wait that gave up may have taken them
	b.redo = nil
	if err == nil && len(ops) > 0 {
		b.ep = ep
		if b.metered {
			b.conn = conn
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
		if b.metered {
			b.conn.Posted(metrics.OpOf(t.Kind))
		}
		if p.Staging(ep, t) {
			p.PostStaged(ep, t)
			continue
		}
		ptrs = append(ptrs, t)
	}
	p.FailedOver(from, ep.Transport(), ops[0].Kind, attempt)
	if len(ptrs) > 0 {
		ep.Post(ptrs, false)
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
	b.SetErr(t.Tag, t.Err)
	if b.metered {
		b.peer.OpDone(b.conn, metrics.OpOf(t.Kind), len(t.Local), b.start, t.Err)
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

// Wait waits for every operation and returns the first error. When ctx
// ends first, operations not yet complete are cancelled where the
// transport can, and Wait returns at once: with the batch's first error
// when every operation has ended, or else with ctx's error, abandoning
// the operations the transport could not take back, whose bytes the
// batch holds (Peer.Hold) until they complete.
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
		for i := range b.tops {
			release, ok := b.peer.Hold(b.tops[i].Local)
			if ok {
				b.holds = append(b.holds, release)
			}
		}
	}
	b.amu.Unlock()
	return fmt.Errorf("batch: %w (abandoned: the transport still owns some of its buffers; see Batch.Wait)", ctx.Err())
}
