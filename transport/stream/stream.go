package stream

import (
	"errors"
	"fmt"
	"net"
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

// readAhead is the size of each connection's read-ahead buffer. A frame
// header is read together with whatever already follows it on the socket, up
// to this much, so a small frame (a 4 KiB page and its header) costs one
// read system call instead of two. A payload larger than what is buffered is
// read straight into its destination after the buffered part is copied, so
// bulk data is copied through the buffer at most readAhead bytes per frame.
const readAhead = 16 << 10

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
