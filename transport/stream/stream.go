package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Options configure a stream for the transport that owns it. Every
// callback runs on a connection's read loop (OnDown: in whichever goroutine
// took the stream down) and must not block.
type Options struct {
	// Name is the transport name the stream reports (Transport) and puts
	// in its errors. Default "tcp".
	Name string
	// OnRevoke, when set, is called when the peer revokes one of its
	// regions, so that the transport drops what it cached of it.
	OnRevoke func(region uint32)
	// OnAttach, when set, completes the answer to a peer that attaches a
	// region: the rdma transport registers it with the device and fills
	// in its rkey; shm exports a GPU region's CUDA IPC handle. An error
	// is the peer's answer instead.
	OnAttach func(res transport.Resolved, info *wire.AttachInfo) error
	// OnDown, when set, is called once when the stream goes down, with the
	// reason.
	OnDown func(err error)
	// BeforeDown, when set, is called when the stream is about to go down,
	// before anything sees it down, in the goroutine that found why (a
	// read loop that read the peer's EOF); perhaps more than once. It may
	// wait, briefly: shm delivers there what the peer sent on its message
	// ring before it went, as a stream delivers what came before an EOF.
	BeforeDown func()
	// OnCredit, when set, receives the peer's returned receive credits
	// instead of the stream's own send path: the owner sends its messages
	// elsewhere (rdma, on its QPs) and counts credits itself. Such an
	// owner posts OpSend to the stream only with a credit of its own in
	// hand (its data path failed: OnPathDown), which the stream then does
	// not count again, and never offers the stream's AppendSend.
	OnCredit func(n int)
	// OnPathDown, when set, is called when the peer says its data path of
	// the connection failed (FramePathDown): the owner carries on over
	// the stream. A stream without it treats that frame as a protocol
	// error.
	OnPathDown func()
}

// opAttach is the internal kind of an attach request in the pending table.
const opAttach transport.OpKind = 0x80

// discardLimit is the largest refused WRITE payload that is read and dropped
// to keep the connection; a larger one closes the connection.
const discardLimit = 64 << 20

// Stream is one or more TCP connections to one peer, carrying frames in
// both directions. It serves the peer's one-sided requests against the
// local Host itself. It implements transport.Endpoint and
// transport.Appender; a transport holds it as a field and forwards to it
// what it does not do itself.
type Stream struct {
	p     transport.Params
	opts  Options
	conns []*conn
	rr    atomic.Uint32
	seq   atomic.Uint64

	mu        sync.Mutex
	pending   map[uint64]*transport.Op
	byRef     map[uint64]struct{} // pending WRITEs sent by reference (sendFile)
	sendWait  []*transport.Op     // sends waiting for credits
	credits   int                 // sends we may still make
	err       error
	inFlight  atomic.Int64 // messages delivered to the host and not yet consumed
	consumed  atomic.Int64 // consumed messages not yet returned as credits
	creditAck int64        // return credits in batches of this many

	// The operations posted and the bytes of those that succeeded
	// (transport.Counter). Atomics: a stream operation takes microseconds
	// and a lock already.
	ops            [transport.NumOpKinds]atomic.Uint64
	sent, received atomic.Uint64
	reads          atomic.Uint64 // socket reads that returned data (Progress)

	done chan struct{}
	wg   sync.WaitGroup
}

var (
	_ transport.Endpoint   = (*Stream)(nil)
	_ transport.Appender   = (*Stream)(nil)
	_ transport.Counter    = (*Stream)(nil)
	_ transport.Progresser = (*Stream)(nil)
)

// New builds a stream over p.Conn plus p.Conns-1 extra connections and
// starts its goroutines. It owns p.Conn from the start, also on error.
func New(ctx context.Context, p transport.Params, opts Options) (*Stream, error) {
	if opts.Name == "" {
		opts.Name = "tcp"
	}
	if p.Conns < 1 {
		p.Conns = 1
	}
	e := &Stream{
		p:         p,
		opts:      opts,
		pending:   make(map[uint64]*transport.Op, 256),
		credits:   p.RecvDepth,
		creditAck: int64(max(1, p.RecvDepth/4)),
		done:      make(chan struct{}),
	}
	ncs := []net.Conn{p.Conn}
	for i := 1; i < p.Conns; i++ {
		var nc net.Conn
		var err error
		if p.Role == transport.Dialer {
			nc, err = p.DialExtra(ctx)
		} else {
			nc, err = p.AcceptExtra(ctx)
		}
		if err != nil {
			for _, c := range ncs {
				c.Close()
			}
			return nil, fmt.Errorf("%s: connection %d of %d to %s: %w", opts.Name, i+1, p.Conns, peerName(p), err)
		}
		ncs = append(ncs, nc)
	}
	for i, nc := range ncs {
		// Only the first connection, which carries small operations and
		// messages, spins on a drained socket (Params.PollSpin): bulk
		// transfers gain nothing from it.
		spin := p.PollSpin
		if i > 0 {
			spin = 0
		}
		e.conns = append(e.conns, newConn(e, nc, spin))
	}
	for _, c := range e.conns {
		e.wg.Add(2)
		go c.readLoop()
		go func() {
			defer e.wg.Done()
			c.s.run(e.done)
		}()
	}
	return e, nil
}

func peerName(p transport.Params) string {
	if p.Remote.Addr != "" {
		return p.Remote.Addr
	}
	return fmt.Sprintf("%x", p.Remote.ID[:6])
}

// Transport reports the transport name.
func (e *Stream) Transport() string { return e.opts.Name }

// Done is closed when the stream is down.
func (e *Stream) Done() <-chan struct{} { return e.done }

// Err reports why the stream is down.
func (e *Stream) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Close fails outstanding operations and waits for the goroutines. It is
// idempotent, and does nothing on a nil stream.
func (e *Stream) Close() error {
	if e == nil {
		return nil
	}
	e.fail(&transport.LinkError{Peer: peerName(e.p), Local: true})
	e.wg.Wait()
	return nil
}

// Fail takes the stream down with err (wrapped in a *transport.LinkError),
// as a connection error would: the owner found the peer at fault on a path
// of its own (shm's message ring). It does not wait for the goroutines
// (Close does) and may be called from any goroutine but a callback's.
func (e *Stream) Fail(err error) { e.fail(e.linkErr(err)) }

// fail takes the stream down once, completing every waiting operation.
func (e *Stream) fail(err error) {
	if e.opts.BeforeDown != nil && e.Err() == nil {
		e.opts.BeforeDown()
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = err
	ops := make([]*transport.Op, 0, len(e.pending)+len(e.sendWait))
	for id, op := range e.pending {
		ops = append(ops, op)
		delete(e.pending, id)
	}
	e.byRef = nil
	ops = append(ops, e.sendWait...)
	e.sendWait = nil
	e.mu.Unlock()
	close(e.done)
	for _, c := range e.conns {
		c.s.close(err) // first, so that later sends fail with err
		c.nc.Close()
	}
	for _, op := range ops {
		complete(op, err)
	}
	if e.opts.OnDown != nil {
		e.opts.OnDown(err)
	}
}

func complete(op *transport.Op, err error) {
	op.Err = err
	op.Done.OpDone(op)
}

// Post submits operations. Their completions come from the stream's
// readers whether or not the poster waits.
func (e *Stream) Post(ops []*transport.Op, wait bool) {
	if len(ops) > 1 && len(ops) <= maxHeldReads && smallReads(ops) {
		// Several small READs, as a pipeline or a batch of page fetches
		// posts them: their requests leave in one system call, not one
		// each.
		c := e.conns[0]
		if c.s.hold() {
			for _, op := range ops {
				e.post(op)
			}
			if err := c.s.release(); err != nil {
				e.fail(e.linkErr(err))
			}
			return
		}
	}
	for _, op := range ops {
		e.post(op)
	}
}

// maxHeldReads bounds the READ requests Post queues under the writer's
// role, far below the queue's limit (queueMax), which a held role could
// never drain.
const maxHeldReads = 1024

// smallReads reports whether every op is a READ small enough to go on the
// first connection (pick), whose request is a header alone.
func smallReads(ops []*transport.Op) bool {
	for _, op := range ops {
		if op.Kind != transport.OpRead || len(op.Local) >= smallOp {
			return false
		}
	}
	return true
}

// Counts implements transport.Counter.
func (e *Stream) Counts() transport.Counts {
	var c transport.Counts
	for i := range c.Ops {
		c.Ops[i] = e.ops[i].Load()
	}
	c.Sent, c.Received = e.sent.Load(), e.received.Load()
	return c
}

// succeeded counts the bytes of an operation that completed without error.
func (e *Stream) succeeded(op *transport.Op) {
	if _, ok := op.Done.(*spread); ok {
		return // a check or a slice: the operation counts once, whole
	}
	switch op.Kind {
	case transport.OpRead:
		e.received.Add(uint64(len(op.Local)))
	case transport.OpWrite, transport.OpWriteImm, transport.OpSend:
		e.sent.Add(uint64(len(op.Local)))
	}
}

func (e *Stream) post(op *transport.Op) {
	if op.Kind < transport.NumOpKinds {
		e.ops[op.Kind].Add(1)
	}
	if k := e.sliceCount(op); k > 1 {
		e.postSpread(op, k)
		return
	}
	e.start(op)
}

// start sends one operation as one frame; a slice of a spread operation
// (slice.go) is one too.
func (e *Stream) start(op *transport.Op) {
	var h wire.Header
	switch op.Kind {
	case transport.OpWrite, transport.OpWriteImm:
		h = wire.Header{Type: wire.FrameWrite, Region: op.Remote.Region, Key: op.Remote.Key, Addr: op.Remote.Addr, Len: uint64(len(op.Local))}
		if op.Kind == transport.OpWriteImm {
			h.Flags, h.Imm = wire.FlagImm, op.Imm
		}
	case transport.OpRead:
		h = wire.Header{Type: wire.FrameRead, Region: op.Remote.Region, Key: op.Remote.Key, Addr: op.Remote.Addr, Len: uint64(len(op.Local))}
	case transport.OpSend:
		e.postSend(op)
		return
	default:
		complete(op, fmt.Errorf("%s: operation kind %d: %w", e.opts.Name, op.Kind, errors.ErrUnsupported))
		return
	}
	if uint64(len(op.Local)) > wire.MaxFramePayload {
		complete(op, fmt.Errorf("%s %s of %d bytes: %w (limit %d per operation)", e.opts.Name, op.Kind, len(op.Local), transport.ErrTooLarge, wire.MaxFramePayload))
		return
	}
	h.ID = e.seq.Add(1)
	// A WRITE completes once the target answered, having read the data:
	// until then the memory is the operation's, and the kernel may send it
	// from the region's memfd without a copy. Such a WRITE cannot be
	// cancelled: the kernel reads its memory until the target has it.
	byRef := sendsByRef(op)
	if !e.lockLive(op) {
		return
	}
	e.pending[h.ID] = op
	if byRef {
		if e.byRef == nil {
			e.byRef = make(map[uint64]struct{})
		}
		e.byRef[h.ID] = struct{}{}
	}
	e.mu.Unlock()
	e.write(e.pick(len(op.Local)), &h, op, byRef)
}

// write sends the frame of op, registered as pending under h.ID, on c: a
// READ's request, or a WRITE's header and data (by reference when byRef).
// A write error takes the stream down.
func (e *Stream) write(c *conn, h *wire.Header, op *transport.Op, byRef bool) {
	var err error
	switch {
	case op.Kind == transport.OpRead:
		err = c.writeFrame(h, nil)
	case byRef:
		var hdr [wire.FrameHeaderLen]byte
		h.Put(hdr[:])
		err = c.s.sendFile(hdr[:], op.Local, op.Region.FD(), op.Region.Offset(op.Local))
	default:
		err = c.writeFrame(h, op.Local)
	}
	if err != nil {
		e.fail(e.linkErr(err))
	}
}

// sendsByRef reports whether op is a WRITE whose data leaves from its
// region's memfd by reference.
func sendsByRef(op *transport.Op) bool {
	return op.Kind != transport.OpRead && op.Region != nil && op.Region.FD() >= 0 && len(op.Local) >= sendFileMin
}

// sendFileMin is the smallest WRITE whose data is sent from its region's
// memfd by reference (sendfile) rather than copied into the socket: the
// copy it saves must outweigh sendfile's own cost (docs/BENCHMARKS.md).
const sendFileMin = 64 << 10

// smallOp is the size below which an operation counts as small: it stays on
// the first connection, and its completion is handed to the waiting goroutine
// at once.
const smallOp = 64 << 10

// pick spreads large operations over the connections; small ones stay on the
// first so that they do not queue behind bulk transfers on the others.
func (e *Stream) pick(n int) *conn {
	if len(e.conns) == 1 || n < smallOp {
		return e.conns[0]
	}
	i := 1 + int(e.rr.Add(1))%(len(e.conns)-1)
	return e.conns[i]
}

// lockLive locks e.mu unless the stream has failed; then it completes op
// with the stream's error instead, and reports false.
func (e *Stream) lockLive(op *transport.Op) bool {
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		complete(op, err)
		return false
	}
	return true
}

func (e *Stream) postSend(op *transport.Op) {
	if len(op.Local) > e.p.MaxMessage {
		complete(op, fmt.Errorf("%s send of %d bytes: %w (max_message is %d)", e.opts.Name, len(op.Local), transport.ErrTooLarge, e.p.MaxMessage))
		return
	}
	if !e.lockLive(op) {
		return
	}
	if e.opts.OnCredit == nil {
		if e.credits == 0 || len(e.sendWait) > 0 {
			e.sendWait = append(e.sendWait, op)
			e.mu.Unlock()
			return
		}
		e.credits--
	}
	// Sends are written under e.mu so that they keep their order.
	err := e.writeSend(op)
	e.mu.Unlock()
	e.finishSend(op, err)
}

// AppendSend implements transport.Appender: the message is encoded
// straight into the first connection's send queue.
func (e *Stream) AppendSend(max int, fill func(b []byte) []byte) (bool, error) {
	if max > e.p.MaxMessage || max > coalesceMax {
		return false, nil
	}
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		return false, err
	}
	if e.credits == 0 || len(e.sendWait) > 0 {
		e.mu.Unlock()
		return false, nil
	}
	// Under e.mu, as writeSend: sends keep their order.
	h := wire.Header{Type: wire.FrameSend, Flags: wire.FlagNoAck}
	err := e.conns[0].s.sendAppend(&h, max, fill)
	if err == nil || !errors.Is(err, errAppendTooLong) {
		e.credits--
	}
	e.mu.Unlock()
	switch {
	case errors.Is(err, errAppendTooLong):
		return false, fmt.Errorf("%s send: %w", e.opts.Name, err)
	case err != nil:
		err = e.linkErr(err)
		e.fail(err)
		return false, err
	}
	return true, nil
}

// writeSend writes one message; e.mu is held.
func (e *Stream) writeSend(op *transport.Op) error {
	h := wire.Header{Type: wire.FrameSend, Flags: wire.FlagNoAck, Len: uint64(len(op.Local))}
	return e.conns[0].writeFrame(&h, op.Local)
}

func (e *Stream) finishSend(op *transport.Op, err error) {
	if err != nil {
		err = e.linkErr(err)
		e.fail(err)
	} else {
		e.succeeded(op)
	}
	complete(op, err)
}

// addCredits lets waiting sends go.
func (e *Stream) addCredits(n int) {
	e.mu.Lock()
	e.credits += n
	for e.credits > 0 && len(e.sendWait) > 0 && e.err == nil {
		op := e.sendWait[0]
		e.sendWait = e.sendWait[1:]
		e.credits--
		err := e.writeSend(op)
		if err != nil {
			e.mu.Unlock()
			e.finishSend(op, err)
			return
		}
		// Completing under e.mu is safe: completers must not call Post.
		e.succeeded(op)
		complete(op, nil)
	}
	e.mu.Unlock()
}

// Progress implements transport.Progresser: the reads that returned data,
// plus, on TCP sockets, the bytes the peer acknowledged and sent (the
// kernel's TCP_INFO: that covers a large WRITE that is still being
// written), and the operations waiting for an answer or for send credit.
func (e *Stream) Progress() (moved uint64, pending int) {
	moved = e.reads.Load()
	for _, c := range e.conns {
		if c.rc != nil {
			if n, err := sys.TCPMoved(c.rc); err == nil {
				moved += n
			}
		}
	}
	e.mu.Lock()
	pending = len(e.pending) + len(e.sendWait)
	e.mu.Unlock()
	return moved, pending
}

// Cancel abandons op if it is still pending. It looks op up by value, a
// walk of the pending table: cancelling is the rare path (a caller's
// context ended), and the table stays keyed by frame ID, which every
// answer looks up, rather than carry a second index that every operation
// would pay for.
func (e *Stream) Cancel(op *transport.Op) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, p := range e.pending {
		if p != op {
			continue
		}
		if _, ok := e.byRef[id]; ok {
			return false // the kernel may still be sending its memory
		}
		delete(e.pending, id)
		return true
	}
	for i, w := range e.sendWait {
		if w == op {
			e.sendWait = append(e.sendWait[:i], e.sendWait[i+1:]...)
			return true
		}
	}
	return false
}

// Consumed returns receive credits to the peer in batches.
func (e *Stream) Consumed(n int) {
	e.inFlight.Add(int64(-n))
	c := e.consumed.Add(int64(n))
	if c < e.creditAck {
		return
	}
	if !e.consumed.CompareAndSwap(c, 0) {
		return // another caller is returning them
	}
	h := wire.Header{Type: wire.FrameCredit, Len: uint64(c)}
	if err := e.conns[0].writeFrame(&h, nil); err != nil {
		e.fail(e.linkErr(err))
	}
}

// PathDown tells the peer that this side's data path of the connection
// failed (see Options.OnPathDown).
func (e *Stream) PathDown() error {
	h := wire.Header{Type: wire.FramePathDown}
	if err := e.conns[0].writeFrame(&h, nil); err != nil {
		err = e.linkErr(err)
		e.fail(err)
		return err
	}
	return nil
}

// Revoke tells the peer that a region is gone.
func (e *Stream) Revoke(id uint32) {
	h := wire.Header{Type: wire.FrameRevoke, Region: id}
	if err := e.conns[0].writeFrame(&h, nil); err != nil {
		e.fail(e.linkErr(err))
	}
}

// AnnounceExport tells the peer of a region exported after the handshake
// (transport.Announcer): export is one encoded wire.Export.
func (e *Stream) AnnounceExport(export []byte) error {
	if len(export) == 0 || len(export) > wire.MaxExportLen {
		return fmt.Errorf("%s: announce an export of %d bytes: want 1 to %d", e.opts.Name, len(export), wire.MaxExportLen)
	}
	h := wire.Header{Type: wire.FrameExport, Len: uint64(len(export))}
	if err := e.conns[0].writeFrame(&h, export); err != nil {
		err = e.linkErr(err)
		e.fail(err)
		return err
	}
	return nil
}

// Attach asks the peer where region id lives, checking key and rights.
func (e *Stream) Attach(ctx context.Context, id uint32, key uint64, want transport.Access) (wire.AttachInfo, error) {
	w := &waiter{ch: make(chan struct{}, 1)}
	buf := make([]byte, wire.AttachInfoLen)
	op := &transport.Op{Kind: opAttach, Local: buf, Remote: transport.RemoteAddr{Region: id, Key: key}, Done: w}
	h := wire.Header{Type: wire.FrameAttach, Region: id, Key: key, Access: uint8(want), ID: e.seq.Add(1)}
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		return wire.AttachInfo{}, err
	}
	e.pending[h.ID] = op
	e.mu.Unlock()
	if err := e.conns[0].writeFrame(&h, nil); err != nil {
		e.fail(e.linkErr(err))
	}
	select {
	case <-w.ch:
	case <-ctx.Done():
		if e.Cancel(op) {
			return wire.AttachInfo{}, ctx.Err()
		}
		<-w.ch
	}
	if op.Err != nil {
		return wire.AttachInfo{}, op.Err
	}
	return wire.DecodeAttachInfo(buf)
}

type waiter struct{ ch chan struct{} }

func (w *waiter) OpDone(*transport.Op) { w.ch <- struct{}{} }

// Notify tells the peer that data it was sent out of band is in place.
func (e *Stream) Notify(n transport.Notification) error {
	h := wire.Header{Type: wire.FrameNotify, Imm: n.Value, Region: n.Region, Addr: n.Addr, Len: n.Len}
	if err := e.conns[0].writeFrame(&h, nil); err != nil {
		err = e.linkErr(err)
		e.fail(err)
		return err
	}
	return nil
}

// linkErr turns a connection error into the stream's error.
func (e *Stream) linkErr(err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	var le *transport.LinkError
	if errors.As(err, &le) {
		return err
	}
	return &transport.LinkError{Peer: peerName(e.p), Cause: err}
}

// takePending removes and returns the operation waiting for response id.
func (e *Stream) takePending(id uint64) *transport.Op {
	e.mu.Lock()
	op := e.pending[id]
	if op != nil {
		delete(e.pending, id)
		delete(e.byRef, id)
	}
	e.mu.Unlock()
	return op
}

// conn is one TCP connection of a stream. Frames go out through its
// sender (sender.go): goroutines that post requests queue them and write
// them, and everything the peer asks of us is answered without ever blocking
// the read loop on a write. So the read loops of both sides always drain,
// and no write can deadlock.
type conn struct {
	e  *Stream
	nc net.Conn
	rc syscall.RawConn // nil when the connection has no file descriptor
	s  *sender
	rd *sys.Reader // nil when the connection has no file descriptor

	// Read-ahead, used by the read loop only: rbuf[rpos:rend] holds bytes
	// read from the socket and not yet consumed.
	rbuf        []byte
	rpos, rend  int
	scratch     []byte // messages larger than the read-ahead buffer
	completed   int    // operations completed and messages delivered since the last read
	handedEpoch int64  // sys.Handed's state
}

func newConn(e *Stream, nc net.Conn, spin time.Duration) *conn {
	c := &conn{e: e, nc: nc, rbuf: make([]byte, readAhead)}
	var raw *sys.Writer
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc = rc
			raw = sys.NewWriter(rc)
			c.rd = sys.NewReader(rc, spin)
		}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if c.rd != nil {
			c.rd.EnableLowWater()
		}
	}
	// A write error takes the stream down from a goroutine of its own: the
	// writer that hit it may hold e.mu (AppendSend writes under it), which
	// linkErr and fail take. The writer returns the error to its caller
	// itself.
	c.s = newSender(nc, raw, func(err error) { go func() { e.fail(e.linkErr(err)) }() })
	return c
}

// writeFrame queues a header and payload as one frame. It returns once the
// payload may be reused: at once for a small one (copied), after the write
// for a large one.
func (c *conn) writeFrame(h *wire.Header, payload []byte) error {
	var hdr [wire.FrameHeaderLen]byte
	h.Put(hdr[:])
	return c.s.send(hdr[:], payload)
}

// reply answers the peer from the read loop without ever blocking it. res is
// released once the payload has been written.
func (c *conn) reply(h *wire.Header, payload []byte, res transport.Resolved) {
	var hdr [wire.FrameHeaderLen]byte
	h.Put(hdr[:])
	c.s.reply(hdr[:], payload, res, c.rpos == c.rend)
}

func (c *conn) readLoop() {
	defer c.e.wg.Done()
	err := c.serve()
	c.e.fail(c.e.linkErr(err))
}

func (c *conn) serve() error {
	e := c.e
	var h wire.Header
	for {
		b, err := c.next(wire.FrameHeaderLen)
		if err != nil {
			return err
		}
		if err := wire.DecodeHeader(b, &h); err != nil {
			return fmt.Errorf("%w: %v", transport.ErrProtocol, err)
		}
		switch h.Type {
		case wire.FrameWrite:
			err = c.serveWrite(&h)
		case wire.FrameRead:
			c.serveRead(&h)
		case wire.FrameSend:
			err = c.serveSend(&h)
		case wire.FrameCredit:
			if h.Len > uint64(e.p.RecvDepth) {
				return fmt.Errorf("%w: %d credits returned, depth is %d", transport.ErrProtocol, h.Len, e.p.RecvDepth)
			}
			if e.opts.OnCredit != nil {
				e.opts.OnCredit(int(h.Len))
			} else {
				e.addCredits(int(h.Len))
			}
		case wire.FrameResp:
			err = c.serveResp(&h)
		case wire.FrameAttach:
			c.serveAttach(&h)
		case wire.FrameNotify:
			e.p.Host.Notify(e, transport.Notification{Value: h.Imm, Region: h.Region, Addr: h.Addr, Len: h.Len})
		case wire.FrameRevoke:
			if e.opts.OnRevoke != nil {
				e.opts.OnRevoke(h.Region)
			}
		case wire.FrameExport:
			err = c.serveExport(&h)
		case wire.FramePathDown:
			if e.opts.OnPathDown == nil {
				return fmt.Errorf("%w: the peer says its data path failed, and this %s connection has none besides the stream", transport.ErrProtocol, e.opts.Name)
			}
			e.opts.OnPathDown()
		}
		if err != nil {
			return err
		}
	}
}

// serveExport hands a peer's export (FrameExport, at most
// wire.MaxExportLen bytes: always within the read-ahead) to the host; a
// host that takes none drops it.
func (c *conn) serveExport(h *wire.Header) error {
	b, err := c.next(int(h.Len))
	if err != nil {
		return err
	}
	if x, ok := c.e.p.Host.(transport.ExportReceiver); ok {
		if err := x.ReceiveExport(b); err != nil {
			return fmt.Errorf("%w: %v", transport.ErrProtocol, err)
		}
	}
	return nil
}

func (c *conn) serveWrite(h *wire.Header) error {
	e := c.e
	res, err := e.p.Host.Resolve(h.Region, h.Key, h.Addr, h.Len, transport.AccessWrite)
	if err != nil {
		if h.Len > discardLimit {
			c.replyErr(h.ID, err)
			return fmt.Errorf("refused write of %d bytes: %w", h.Len, err)
		}
		if derr := c.discard(h.Len); derr != nil {
			return derr
		}
		c.replyErr(h.ID, err)
		return nil
	}
	err = c.readFull(res.Mem, writeMark)
	var cerr error
	if err == nil {
		cerr = res.Commit()
	}
	res.Release()
	if err != nil {
		return err
	}
	if cerr != nil {
		c.replyErr(h.ID, cerr)
		return nil
	}
	if h.Flags&wire.FlagImm != 0 {
		e.p.Host.Notify(e, transport.Notification{Value: h.Imm, Region: h.Region, Addr: h.Addr, Len: h.Len})
	}
	if h.Flags&wire.FlagNoAck == 0 {
		c.reply(&wire.Header{Type: wire.FrameResp, ID: h.ID}, nil, transport.Resolved{})
	}
	return nil
}

func (c *conn) serveRead(h *wire.Header) {
	res, err := c.e.p.Host.Resolve(h.Region, h.Key, h.Addr, h.Len, transport.AccessRead)
	if err != nil {
		c.replyErr(h.ID, err)
		return
	}
	c.reply(&wire.Header{Type: wire.FrameResp, ID: h.ID, Len: h.Len}, res.Mem, res)
}

func (c *conn) serveAttach(h *wire.Header) {
	res, err := c.e.p.Host.Lookup(h.Region, h.Key, transport.Access(h.Access))
	if err != nil {
		c.replyErr(h.ID, err)
		return
	}
	r := res.Region
	if r == nil {
		c.replyErr(h.ID, fmt.Errorf("attach region %d: the host named no registered region", h.Region))
		return
	}
	info := wire.AttachInfo{PID: uint32(os.Getpid()), FD: int32(r.FD()), Base: r.Base(), Len: r.Len(), Key: h.Key}
	if loc := r.Location(); !loc.IsHost() {
		info.Kind, info.Device = uint8(loc.Kind), uint8(loc.Device)
	}
	if c.e.opts.OnAttach != nil {
		if err := c.e.opts.OnAttach(res, &info); err != nil {
			res.Release()
			c.replyErr(h.ID, err)
			return
		}
	}
	res.Release()
	b := make([]byte, wire.AttachInfoLen)
	info.Put(b)
	c.reply(&wire.Header{Type: wire.FrameResp, ID: h.ID, Len: uint64(len(b))}, b, transport.Resolved{})
}

func (c *conn) serveSend(h *wire.Header) error {
	e := c.e
	if h.Len > uint64(e.p.MaxMessage) {
		return fmt.Errorf("%w: message of %d bytes, max_message is %d", transport.ErrProtocol, h.Len, e.p.MaxMessage)
	}
	if e.inFlight.Add(1) > int64(e.p.RecvDepth) {
		return fmt.Errorf("%w: peer sent past its receive credits", transport.ErrProtocol)
	}
	// The host may not keep msg (Host.Deliver), so it is lent: a slice of
	// the read-ahead buffer when it fits there, else of a scratch buffer.
	var msg []byte
	if h.Len <= readAhead {
		b, err := c.next(int(h.Len))
		if err != nil {
			return err
		}
		msg = b
	} else {
		if uint64(cap(c.scratch)) < h.Len {
			c.scratch = make([]byte, h.Len)
		}
		msg = c.scratch[:h.Len]
		if err := c.readFull(msg, readMark); err != nil {
			return err
		}
	}
	e.p.Host.Deliver(e, msg)
	c.completed++
	if h.Len < smallOp {
		c.handedOver() // as for a small operation (serveResp)
	}
	return nil
}

func (c *conn) serveResp(h *wire.Header) error {
	op := c.e.takePending(h.ID)
	if h.Status != wire.StatusOK {
		text := make([]byte, h.Len)
		if err := c.readFull(text, readMark); err != nil {
			return err
		}
		if op != nil {
			complete(op, respError(h.Status, string(text), op))
		}
		return nil
	}
	if op == nil {
		// Cancelled: drop whatever data came back.
		return c.discard(h.Len)
	}
	if op.Kind == transport.OpRead || op.Kind == opAttach {
		if h.Len != uint64(len(op.Local)) {
			complete(op, fmt.Errorf("%w: response of %d bytes to a read of %d", transport.ErrProtocol, h.Len, len(op.Local)))
			return fmt.Errorf("%w: response length mismatch", transport.ErrProtocol)
		}
		if err := c.readFull(op.Local, readMark); err != nil {
			complete(op, c.e.linkErr(err))
			return err
		}
	} else if h.Len != 0 {
		complete(op, fmt.Errorf("%w: unexpected response payload", transport.ErrProtocol))
		return fmt.Errorf("%w: unexpected response payload", transport.ErrProtocol)
	}
	small := len(op.Local) < smallOp
	c.e.succeeded(op) // an attach is none of the kinds counted
	complete(op, nil)
	c.completed++
	if small {
		// A small operation is most likely waited for (a Read or Write
		// call). Bulk completions do not yield: the read loop keeps
		// draining the socket.
		c.handedOver()
	}
	return nil
}

// handedOver is called after the read loop completed a small operation or
// delivered a message, each of which most likely woke a goroutine: the
// caller of a Read or Write, a Recv, a kv client's call waiting for its
// answer. With nothing more buffered, the next read most likely finds the
// socket empty and parks; the goroutine it woke, next in line on this P,
// runs before that read rather than after it. A message handler that
// answered inline (a kv server's GET) woke nobody, and the yield returns at
// once, unless another goroutine was waiting to run.
//
// While the process is busy (sys.Handed: more connections than Ps, and
// more than two, handed something over within the last millisecond or two) it does not
// yield. The loop's next read then finds the socket drained and waits in
// the poller, whose next sweep serves every ready connection in turn;
// yielding loops that found their next answer already there would keep
// the run queues from ever emptying, and Go polls the network only when
// they are empty, leaving the waiting connections unread for milliseconds.
//
// When this read completed one, the queue is uncorked first: the
// goroutine's next request goes out at once, from that goroutine. When it
// completed several, the queue stays corked while the goroutines run, and
// their next requests leave together in one writev before the next read:
// with many operations in flight, batches sustain themselves.
func (c *conn) handedOver() {
	if c.rpos != c.rend {
		return
	}
	if c.completed <= 1 {
		c.s.uncork()
	}
	if sys.Handed(&c.handedEpoch) {
		return // busy: the poller's sweep serves this connection again
	}
	runtime.Gosched()
}

// replyErr answers request id with err's status and text.
func (c *conn) replyErr(id uint64, err error) {
	st := wire.StatusBadRequest
	var ae *transport.AccessError
	if errors.As(err, &ae) {
		st = accessStatus[ae.Kind]
	}
	text := []byte(err.Error())
	if len(text) > wire.MaxErrorText {
		text = text[:wire.MaxErrorText]
	}
	c.reply(&wire.Header{Type: wire.FrameResp, ID: id, Status: st, Len: uint64(len(text))}, text, transport.Resolved{})
}

var accessStatus = map[transport.AccessKind]wire.Status{
	transport.UnknownRegion: wire.StatusUnknownRegion,
	transport.WrongKey:      wire.StatusWrongKey,
	transport.NoAccess:      wire.StatusNoAccess,
	transport.OutOfRange:    wire.StatusOutOfRange,
}

// respError rebuilds the target's refusal at the initiator.
func respError(st wire.Status, text string, op *transport.Op) error {
	var kind transport.AccessKind
	switch st {
	case wire.StatusUnknownRegion:
		kind = transport.UnknownRegion
	case wire.StatusWrongKey:
		kind = transport.WrongKey
	case wire.StatusNoAccess:
		kind = transport.NoAccess
	case wire.StatusOutOfRange:
		kind = transport.OutOfRange
	default:
		return fmt.Errorf("target refused %s: %s: %s", op.Kind, st, text)
	}
	want := transport.AccessWrite
	if op.Kind == transport.OpRead {
		want = transport.AccessRead
	}
	return &transport.AccessError{Kind: kind, Want: want, Region: op.Remote.Region, Addr: op.Remote.Addr, Len: uint64(len(op.Local))}
}

// readAhead is the size of each connection's read-ahead buffer. A frame
// header is read together with whatever already follows it on the socket, up
// to this much, so a small frame (a 4 KiB page and its header) costs one
// read system call instead of two. A payload larger than what is buffered is
// read straight into its destination after the buffered part is copied, so
// bulk data is copied through the buffer at most readAhead bytes per frame.
const readAhead = 16 << 10

// readChunk bounds each read system call. One huge recvmsg holds the socket
// lock while it copies, the packets arriving meanwhile pile up in the socket
// backlog, and on loopback an overflowing backlog drops them: a 200 ms
// retransmission timeout for a copy that should take a millisecond. Reads of
// at most 256 KiB let the kernel drain the backlog between them.
const readChunk = 256 << 10

// rawReadMax is the largest read made with a raw system call (sys.Reader);
// larger ones go through the connection, which gives up the P meanwhile.
const rawReadMax = 64 << 10

// read makes one read from the socket into b, for a caller that needs want
// bytes (at least len(b)) before it can go on. Before it, whatever the read
// loop queued while it handled what it had read goes out (sender.uncork).
func (c *conn) read(b []byte, want int) (int, error) {
	c.s.uncork()
	defer c.s.cork()
	c.completed = 0
	var n int
	var err error
	switch {
	case c.rd != nil && len(b) > rawReadMax:
		// The rest of a large payload: the reader waits in the kernel
		// until much of it has arrived (sys.Reader.ReadBulk), not for
		// each segment.
		n, err = c.rd.ReadBulk(b, want)
	case c.rd != nil && len(b) <= rawReadMax:
		n, err = c.rd.Read(b)
	default:
		n, err = c.nc.Read(b)
	}
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	if n > 0 {
		c.e.reads.Add(1)
	}
	return n, err
}

// fill reads until at least n bytes (n <= readAhead) are buffered.
func (c *conn) fill(n int) error {
	if c.rpos == c.rend {
		c.rpos, c.rend = 0, 0
	} else if len(c.rbuf)-c.rpos < n {
		c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
		c.rpos = 0
	}
	for c.rend-c.rpos < n {
		m, err := c.read(c.rbuf[c.rend:], n-(c.rend-c.rpos))
		c.rend += m
		if err != nil {
			if err == io.EOF && c.rend-c.rpos > 0 {
				err = io.ErrUnexpectedEOF
			}
			if c.rend-c.rpos >= n {
				break
			}
			return err
		}
	}
	return nil
}

// next returns the next n (<= readAhead) bytes of the stream; they are valid
// until the next read.
func (c *conn) next(n int) ([]byte, error) {
	if c.rend-c.rpos < n {
		if err := c.fill(n); err != nil {
			return nil, err
		}
	}
	b := c.rbuf[c.rpos : c.rpos+n]
	c.rpos += n
	return b, nil
}

// Receive low-water marks (sys.Reader.ReadBulk). A read loop that waits
// for the rest of a large payload is woken once that much of it has
// arrived, not at each segment the sender's writes make, which on loopback
// is one wake-up, and two thread switches, per 64 KiB. How much to wait
// for is a trade: a reader that sleeps through the whole arrival costs the
// fewest wake-ups, one that copies while the rest arrives ends sooner.
// Measured on loopback at 1 MiB (docs/TUNING.md, "Waking a reader once per
// payload"), a WRITE's payload gains most when its target waits for all of
// it, and a READ's data when its initiator wakes at each 256 KiB (one read
// chunk); waiting for all of a READ's data lost 10% of its throughput.
const (
	writeMark = 1 << 20
	readMark  = readChunk
)

// readFull fills b from the stream: first from the read-ahead, then, for a
// small rest, through the buffer (one system call may bring the next frame's
// header too), and for a large rest straight from the socket, waiting for
// up to mark bytes of it at a time (see writeMark).
func (c *conn) readFull(b []byte, mark int) error {
	n := copy(b, c.rbuf[c.rpos:c.rend])
	c.rpos += n
	b = b[n:]
	if len(b) == 0 {
		return nil
	}
	if len(b) < len(c.rbuf)/2 {
		if err := c.fill(len(b)); err != nil {
			return unexpected(err)
		}
		c.rpos += copy(b, c.rbuf[c.rpos:c.rend])
		return nil
	}
	for len(b) > 0 {
		m, err := c.read(b[:min(len(b), readChunk)], min(len(b), mark))
		b = b[m:]
		if err != nil && len(b) > 0 {
			return unexpected(err)
		}
	}
	return nil
}

// discard drops the next n bytes of the stream.
func (c *conn) discard(n uint64) error {
	for n > 0 {
		if c.rpos == c.rend {
			if err := c.fill(1); err != nil {
				return unexpected(err)
			}
		}
		m := min(n, uint64(c.rend-c.rpos))
		c.rpos += int(m)
		n -= m
	}
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
