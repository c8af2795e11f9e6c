package xfer

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Peer is a connection to another engine. Either side may start any
// operation on it. Its methods are safe for concurrent use.
type Peer struct {
	e        *Engine
	dialAddr string // set for peers this engine dialed: they reconnect

	mu      sync.Mutex // guards remote, exports, dialing and closed
	remote  transport.PeerInfo
	exports map[string]RegionDesc
	closed  bool
	dialing chan struct{} // closed when a dial in progress ends

	ep   atomic.Pointer[epBox]
	mark atomic.Uint64 // the engine's revoke count when the connection began

	stats peerStats

	inboxMu sync.Mutex
	handler atomic.Pointer[func([]byte)]       // set by Handle
	notify  atomic.Pointer[func(Notification)] // set by HandleNotify
	inbox   [][]byte
	stash   []byte // a message Recv could not fit, returned first next time
	signal  chan struct{}
	done    chan struct{}
}

// epBox is the current endpoint and, when the engine has metrics, its
// counters: published together, so that an operation counts on the
// counters of the endpoint it is posted to.
type epBox struct {
	ep   transport.Endpoint
	conn *connStats
}

func (e *Engine) newPeer(dialAddr string, remote transport.PeerInfo, exports []wire.Export) *Peer {
	p := &Peer{e: e, dialAddr: dialAddr, signal: make(chan struct{}, 1), done: make(chan struct{})}
	p.markRevokes()
	p.setRemote(remote, exports)
	return p
}

// markRevokes notes the engine's revoke count before a connection starts:
// setEndpoint replays later revokes to the new endpoint.
func (p *Peer) markRevokes() {
	p.e.mu.Lock()
	p.mark.Store(p.e.revSeq)
	p.e.mu.Unlock()
}

func (p *Peer) setRemote(remote transport.PeerInfo, exports []wire.Export) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remote = remote
	p.exports = make(map[string]RegionDesc, len(exports))
	for _, x := range exports {
		p.exports[x.Name] = descFromWire(x.Desc)
	}
}

func (p *Peer) setEndpoint(ep transport.Endpoint) *epBox {
	b := &epBox{ep: ep}
	if m := p.e.metrics; m != nil {
		b.conn = m.newConn(ep, p.stats.conn.Load())
		old := p.stats.conn.Swap(b.conn)
		if old != nil {
			ops, bytes := old.opsAndBytes()
			p.stats.prevOps.Add(ops)
			p.stats.prevBytes.Add(bytes)
		}
	}
	p.stats.upSince.Store(time.Now().UnixNano())
	p.ep.Store(b)
	p.e.replayRevokes(p, ep)
	return b
}

func (p *Peer) current() transport.Endpoint {
	if b := p.ep.Load(); b != nil {
		return b.ep
	}
	return nil
}

// String names the peer by address or ID.
func (p *Peer) String() string {
	if p.dialAddr != "" {
		return p.dialAddr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.remote.Addr != "" {
		return p.remote.Addr
	}
	return ID(p.remote.ID).String()
}

// ID is the remote engine's ID.
func (p *Peer) ID() ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.remote.ID
}

// Transport is the transport in use: "tcp", "shm" or "rdma" ("" while not
// connected).
func (p *Peer) Transport() string {
	if ep := p.current(); ep != nil {
		return ep.Transport()
	}
	return ""
}

// Region returns the descriptor the remote engine exported under name.
func (p *Peer) Region(name string) (RegionDesc, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.exports[name]
	return d, ok
}

// endpoint returns a live endpoint, with its counters, dialing again if
// this engine dialed the peer and the last connection failed.
func (p *Peer) endpoint(ctx context.Context) (*epBox, error) {
	for {
		var ep transport.Endpoint
		if b := p.ep.Load(); b != nil {
			ep = b.ep
			select {
			case <-ep.Done():
			default:
				return b, nil
			}
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("peer %s: %w", p, ErrClosed)
		}
		if p.dialAddr == "" {
			p.mu.Unlock()
			if ep == nil {
				return nil, fmt.Errorf("peer %s: not connected: %w", p, ErrClosed)
			}
			return nil, ep.Err()
		}
		if p.dialing != nil {
			ch := p.dialing
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		p.mu.Unlock()
		if ep != nil {
			ep.Close()
			p.e.log.Info("reconnecting to peer", "peer", p.dialAddr, "after", ep.Err())
		}
		p.markRevokes()
		nep, err := p.e.connect(ctx, p)
		p.mu.Lock()
		p.dialing = nil
		close(ch)
		closed := p.closed
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if closed {
			nep.Close()
			return nil, fmt.Errorf("peer %s: %w", p, ErrClosed)
		}
		b := p.setEndpoint(nep)
		p.watch(nep)
		return b, nil
	}
}

// watch releases ep's resources (its queue pairs, rings, buffers and
// goroutines) as soon as it fails, rather than when the peer is next used or
// closed: a peer that went away may never be used again. A peer this engine
// accepted cannot reconnect, so it also leaves the engine's peers; its
// operations keep failing with the link's error. A dialed peer dials again
// on its next operation.
func (p *Peer) watch(ep transport.Endpoint) {
	go func() {
		select {
		case <-ep.Done():
			ep.Close()
			if p.dialAddr == "" {
				p.e.removePeer(p)
			}
		case <-p.done:
		}
	}()
}

// Down returns a channel that is closed when the peer's current connection
// fails or the peer is closed. A peer this engine dialed reconnects on its
// next operation; call Down again to watch the new connection. A peer that
// dialed this engine cannot reconnect: once its connection fails, the engine
// releases the connection's resources and drops it from Peers, and its
// operations fail with the link's error. Before the
// first connection, Down returns a channel that is already closed.
func (p *Peer) Down() <-chan struct{} {
	if ep := p.current(); ep != nil {
		return ep.Done()
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Close closes the connection; operations in flight fail with an error
// matching ErrClosed. Idempotent.
func (p *Peer) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.done)
	var err error
	if ep := p.current(); ep != nil {
		err = ep.Close()
	}
	p.e.removePeer(p)
	return err
}

// OpKind is the kind of an operation in a batch.
type OpKind = transport.OpKind

// Operation kinds.
const (
	OpWrite       = transport.OpWrite
	OpRead        = transport.OpRead
	OpWriteNotify = transport.OpWriteImm
	OpSend        = transport.OpSend
)

// Op is one operation of a batch. Local must lie in registered memory and
// must not be touched until the batch is done. Err is set when it completes.
type Op struct {
	Kind   OpKind
	Local  []byte
	Remote RemoteAddr // unused by OpSend
	Value  uint32     // the notification value of OpWriteNotify
	Err    error
}

// call is one synchronous operation; calls are pooled so that a steady
// stream of Write and Read allocates nothing.
type call struct {
	op   transport.Op
	ops  [1]*transport.Op
	done chan struct{}
	// sample counts down to the next operation timed for the latency
	// histograms: one in the connection's every (sampleEvery) of those
	// each call carries, with no atomic and no random draw (the metrics).
	sample uint8
}

var callPool = sync.Pool{New: func() any {
	c := &call{done: make(chan struct{}, 1), sample: uint8(1 + rand.N(latencyEvery))}
	c.ops[0] = &c.op
	c.op.Done = c
	return c
}}

func (c *call) OpDone(*transport.Op) { c.done <- struct{}{} }

// timed reports whether this operation is one of those timed for the
// latency histograms.
func (c *call) timed(every uint8) bool {
	c.sample--
	if c.sample == 0 {
		c.sample = every
		return true
	}
	return false
}

// do runs one operation and waits for it. With metrics, their hooks are
// called on each return path rather than deferred: a deferred closure
// costs more than the metrics' whole budget on a 64-byte shm WRITE.
func (p *Peer) do(ctx context.Context, kind OpKind, local []byte, remote RemoteAddr, imm uint32) error {
	b, err := p.endpoint(ctx)
	if err != nil {
		if p.e.metrics != nil {
			p.e.metrics.opFailed(p, opIndex(kind), err)
		}
		return err
	}
	ep, conn := b.ep, b.conn // conn is nil without metrics
	op := opIndex(kind)
	c := callPool.Get().(*call)
	var start time.Time
	if conn != nil && c.timed(conn.every) {
		start = time.Now()
	}
	lr, err := p.e.regions.pinLocal(local)
	if err != nil {
		callPool.Put(c)
		err = fmt.Errorf("%s: %w", kind, p.e.closedOr(err))
		if conn != nil {
			p.unposted(conn, op, err)
		}
		return err
	}
	if conn != nil && conn.counter == nil {
		conn.ops[op].Add(1) // an endpoint that does not count its own
	}
	c.op.Kind, c.op.Local, c.op.Remote, c.op.Imm, c.op.Err, c.op.Region = kind, local, remote, imm, nil, lr
	c.op.Waited = true
	staged := staging(ep, &c.op)
	if staged {
		p.e.postStaged(ep, &c.op)
	} else {
		ep.Post(c.ops[:])
	}
	if done := ctx.Done(); done != nil {
		select {
		case <-c.done:
		case <-done:
			if staged || !ep.Cancel(&c.op) {
				<-c.done
				break
			}
			c.op.Local, c.op.Region = nil, nil
			callPool.Put(c)
			lr.Unpin()
			err = fmt.Errorf("%s: %w", kind, ctx.Err())
			if conn != nil {
				p.opDone(conn, op, len(local), start, err)
			}
			return err
		}
	} else {
		<-c.done
	}
	err = c.op.Err
	c.op.Local, c.op.Err, c.op.Region = nil, nil, nil
	callPool.Put(c)
	lr.Unpin()
	if conn != nil {
		p.opDone(conn, op, len(local), start, err)
	}
	return err
}

// Write copies src, which must lie in registered memory, to the peer's
// memory at dst, and returns once it is in place. When ctx ends first,
// Write cancels the operation where the transport can and returns ctx's
// error. Over tcp, a WRITE of 64 KiB or more from memfd-backed memory (the
// engine's own under the auto and shm policies, or with memory: memfd)
// leaves by reference, the
// kernel reading src until the peer has it: it cannot be cancelled, and
// Write then waits for the peer's answer or the connection's failure.
func (p *Peer) Write(ctx context.Context, src []byte, dst RemoteAddr) error {
	return p.do(ctx, OpWrite, src, dst, 0)
}

// Read copies the peer's memory at src into dst, which must lie in
// registered memory.
func (p *Peer) Read(ctx context.Context, dst []byte, src RemoteAddr) error {
	return p.do(ctx, OpRead, dst, src, 0)
}

// WriteNotify is Write, and then the peer receives a Notification carrying
// value (Engine.WaitNotify) once the data is in place.
func (p *Peer) WriteNotify(ctx context.Context, src []byte, dst RemoteAddr, value uint32) error {
	return p.do(ctx, OpWriteNotify, src, dst, value)
}

// Send delivers msg as one message to the peer's receive queue (Peer.Recv on
// the other side). Messages arrive in order. Send waits while the peer's
// queue is full. msg must lie in registered memory and be at most the
// negotiated max_message.
func (p *Peer) Send(ctx context.Context, msg []byte) error {
	return p.do(ctx, OpSend, msg, RemoteAddr{}, 0)
}

// TrySendAppend sends one message that fill appends to b, encoded straight
// into the transport's send queue: no buffer of registered memory, no
// batch, no wait for a completion. It is the fast path of small
// request/response protocols such as the kv package's, on tcp and shm.
//
// It reports false, without calling fill, when the message cannot go that
// way at once: on rdma (messages leave from registered memory), while no
// connection is up, with no receive credit left at the peer, or with max
// above the transport's limit for such messages (16 KiB). The caller then
// sends the message with Send. fill must append at most max bytes, must
// not block, and must not call the peer's methods. An error means the
// connection failed, or fill appended more than max bytes; nothing was sent.
func (p *Peer) TrySendAppend(max int, fill func(b []byte) []byte) (bool, error) {
	ep := p.current()
	if ep == nil {
		return false, nil // Send dials
	}
	select {
	case <-ep.Done():
		return false, nil // Send redials, or words the failure
	default:
	}
	a, ok := ep.(transport.Appender)
	if !ok {
		return false, nil
	}
	return a.AppendSend(max, fill)
}

// Recv waits for the next message from this peer and copies it into buf.
// When buf is too small, it returns an error matching ErrTooLarge that states
// the size needed, and keeps the message for the next Recv.
func (p *Peer) Recv(ctx context.Context, buf []byte) (n int, err error) {
	if p.e.metrics != nil {
		start := recvStart()
		defer func() { p.recvDone(n, start, err) }()
	}
	for {
		p.inboxMu.Lock()
		msg := p.stash
		if msg != nil {
			p.stash = nil
		} else if len(p.inbox) > 0 {
			msg = p.inbox[0]
			p.inbox[0] = nil
			p.inbox = p.inbox[1:]
		}
		if msg != nil {
			if len(msg) > len(buf) {
				p.stash = msg
				p.inboxMu.Unlock()
				return 0, fmt.Errorf("recv: message of %d bytes, buffer of %d: %w", len(msg), len(buf), ErrTooLarge)
			}
			more := len(p.inbox) > 0
			p.inboxMu.Unlock()
			if more {
				p.wake()
			}
			if ep := p.current(); ep != nil {
				ep.Consumed(1)
			}
			return copy(buf, msg), nil
		}
		p.inboxMu.Unlock()
		var epDone <-chan struct{}
		if ep := p.current(); ep != nil && p.dialAddr == "" {
			epDone = ep.Done()
		}
		select {
		case <-p.signal:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-p.done:
			return 0, fmt.Errorf("recv from %s: %w", p, ErrClosed)
		case <-epDone:
			return 0, fmt.Errorf("recv from %s: %w", p, p.current().Err())
		}
	}
}

// Handle makes f receive the peer's messages, in order, instead of Recv:
// first those already waiting for Recv, then each as it arrives. f runs on
// the transport's receive path, one message at a time, so it must not block
// (hand slow work to a goroutine) and must not keep msg after it returns.
// It saves a goroutine hand-off per message; services with their own
// request loop (the kv package) use it. Call Handle once, before any Recv.
func (p *Peer) Handle(f func(msg []byte)) {
	p.inboxMu.Lock()
	defer p.inboxMu.Unlock()
	// Deliver waits on inboxMu while the queue drains, so order holds.
	var n int
	if p.stash != nil {
		f(p.stash)
		p.stash = nil
		n++
	}
	for _, m := range p.inbox {
		f(m)
		n++
	}
	p.inbox = nil
	p.handler.Store(&f)
	if ep := p.current(); ep != nil && n > 0 {
		ep.Consumed(n)
	}
}

// HandleNotify makes f receive the notifications of this peer's
// write-with-notify operations (WriteNotify on the other side) instead of
// Engine.WaitNotify, each once its data is in place. f runs on the
// transport's receive path, so it must not block; it saves the hand-off
// to the goroutine that waits in WaitNotify, and lets a request/response
// protocol answer a request with the write of its data alone (the kv
// package's GETs). Notifications that arrived before HandleNotify wait in
// the engine's queue. Call it once, before the peer is asked to notify.
func (p *Peer) HandleNotify(f func(Notification)) {
	p.notify.Store(&f)
}

// Queued is the number of messages waiting for Recv.
func (p *Peer) Queued() int {
	p.inboxMu.Lock()
	defer p.inboxMu.Unlock()
	n := len(p.inbox)
	if p.stash != nil {
		n++
	}
	return n
}

func (p *Peer) wake() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
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
		*t = transport.Op{Kind: ops[i].Kind, Local: ops[i].Local, Remote: ops[i].Remote, Imm: ops[i].Value, Done: b, Tag: i, Waited: waited}
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
		if staging(ep, t) {
			b.ep = ep
			p.e.postStaged(ep, t)
			continue
		}
		b.ptrs = append(b.ptrs, t)
	}
	if len(b.ptrs) > 0 {
		b.ep = ep
		ep.Post(b.ptrs)
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
	b.p, b.conn, b.start = nil, nil, time.Time{}
	b.remaining.Store(int64(n))
}

// finish hands out the token that says every operation is done.
func (b *Batch) finish() { b.done <- struct{}{} }

// OpDone implements transport.Completer.
func (b *Batch) OpDone(t *transport.Op) {
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
		b.finish()
	}
}

// Done reports, without waiting, whether every operation has completed.
func (b *Batch) Done() bool { return b.remaining.Load() == 0 }

// Wait waits for every operation and returns the first error (each
// operation's own is in its Err). When ctx ends first, operations not yet
// complete are cancelled where the transport can; Wait returns ctx's error
// and the batch's memory is free once Wait returns.
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
	<-b.done
	b.done <- struct{}{}
	return b.first
}

// host is the transport.Host a peer's endpoint serves requests with.
func (p *Peer) host() transport.Host { return peerHost{p} }

type peerHost struct{ p *Peer }

var (
	_ transport.Host     = peerHost{}
	_ transport.Exporter = peerHost{}
)

func (h peerHost) Resolve(id uint32, key, addr, n uint64, want Access) (transport.Resolved, error) {
	r, err := h.p.e.regions.resolve(id, key, addr, n, want)
	if err == nil && h.p.e.metrics != nil {
		h.p.served(want, n)
	}
	return r, err
}

func (h peerHost) Lookup(id uint32, key uint64, want Access) (transport.Resolved, error) {
	return h.p.e.regions.lookup(id, key, want)
}

func (h peerHost) Deliver(ep transport.Endpoint, msg []byte) {
	p := h.p
	if f := p.handler.Load(); f != nil {
		if p.e.metrics != nil {
			p.handled(len(msg))
		}
		(*f)(msg)
		ep.Consumed(1)
		return
	}
	p.inboxMu.Lock()
	if f := p.handler.Load(); f != nil { // Handle ran meanwhile
		p.inboxMu.Unlock()
		(*f)(msg)
		ep.Consumed(1)
		return
	}
	p.inbox = append(p.inbox, bytes.Clone(msg)) // msg is only lent
	p.inboxMu.Unlock()
	p.wake()
}

func (h peerHost) Notify(_ transport.Endpoint, n transport.Notification) {
	note := Notification{Peer: h.p, Value: n.Value, Region: n.Region, Addr: n.Addr, Len: n.Len}
	if f := h.p.notify.Load(); f != nil {
		(*f)(note)
		return
	}
	h.p.e.notes.push(note)
}

// closedOr returns ErrClosed once the engine is closing (Close deregisters
// the memory an operation in flight may name), err otherwise.
func (e *Engine) closedOr(err error) error {
	if e.ctx.Err() != nil {
		return fmt.Errorf("engine closed: %w", ErrClosed)
	}
	return err
}
