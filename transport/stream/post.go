package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// What the owner posts on a stream: operations (Post), messages in place
// (AppendSend), returned credits, attach requests, revocations and
// notifications.

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
