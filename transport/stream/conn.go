package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// A stream's connections: New opens them (p.Conn and the extra ones) and
// starts each one's reader and sender; a connection's reader serves the
// peer's frames: its one-sided requests against the local Host, its sends,
// and its answers to this side's requests.

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
