package stream

import (
	"errors"
	"sync"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// One large WRITE or READ is cut into slices, one per bulk connection (all
// but the first), which move together, each its own frame on its own
// connection; the operation completes when all of them have. This is what
// the verbs transport does over its queue pairs, and why callers need not
// cut large transfers into pieces themselves.
//
// A sliced operation behaves as an unsliced one would:
//
//   - Access is checked for the whole range before a byte moves: two
//     empty operations of the same kind, at the start and at the end of the
//     range, go first on the first connection, and the slices leave only
//     once both were accepted. A region is one contiguous range with one
//     key and one set of rights, so the two answers speak for every byte
//     between them. A refusal fails the operation with an AccessError that
//     names its whole range, with nothing touched. The check costs one
//     round trip, which is why only operations of at least two slices of
//     sliceMin are cut.
//   - A connection lost mid-slice takes the stream down (as any connection
//     error does): every slice still pending completes with the stream's
//     error, and the operation completes once, with that error. Bytes that
//     arrived stay, as for an unsliced WRITE cut off mid-payload. Its bytes
//     count as sent or received (Counts) only when every slice succeeded.
//   - A write-with-notify is not cut: it stays one frame on one connection,
//     so that the target has all its data before it delivers the
//     notification (the verbs transport keeps it on one queue pair).
//   - A sliced operation cannot be cancelled (Cancel reports false, and the
//     operation completes as usual): its slices are written by goroutines of
//     their own, from the operation's memory, once the check returned.
//
// The slices of a WRITE are written concurrently, one goroutine per bulk
// connection but the last, which the goroutine that posts it writes itself:
// a connection's writer blocks until a large payload is in the socket, and
// written one after another the slices would move no faster than one
// connection.

// sliceMin is the smallest slice: an operation is cut only when each of at
// least two slices gets this much, and only while fewer operations than
// bulk connections are outstanding.
const sliceMin = 1 << 20

// sliceCount is how many slices op is cut into: 1 when it is not cut.
func (e *Stream) sliceCount(op *transport.Op) int {
	bulk := len(e.conns) - 1
	n := uint64(len(op.Local))
	switch {
	case op.Kind != transport.OpWrite && op.Kind != transport.OpRead,
		bulk < 2, n > wire.MaxFramePayload,
		op.Remote.Addr+n < op.Remote.Addr: // wraps: refused whole
		return 1
	}
	k := min(bulk, len(op.Local)/sliceMin)
	if k > 1 {
		// Operations already outstanding keep the bulk connections busy
		// on their own: then each goes whole, on one connection, as
		// slicing operations that fill a pipeline cost more than it gave
		// (docs/TUNING.md).
		e.mu.Lock()
		busy := len(e.pending) >= bulk
		e.mu.Unlock()
		if busy {
			return 1
		}
	}
	return k
}

// spread is one operation cut into slices: the Completer of its two checks
// and then of its slices.
type spread struct {
	e      *Stream
	op     *transport.Op
	checks [2]transport.Op
	parts  []transport.Op
	ready  chan struct{} // closed when both checks completed

	mu   sync.Mutex
	left int   // checks, then slices, not yet complete
	err  error // the first error of a check or a slice
}

// postSpread posts op, to be cut into k slices once its checks return.
func (e *Stream) postSpread(op *transport.Op, k int) {
	sp := &spread{e: e, op: op, left: len(spread{}.checks), ready: make(chan struct{})}
	n := uint64(len(op.Local))
	var hs [2]wire.Header
	typ := wire.FrameWrite
	if op.Kind == transport.OpRead {
		typ = wire.FrameRead
	}
	for i, at := range [2]uint64{0, n} {
		r := op.Remote
		r.Addr += at
		sp.checks[i] = transport.Op{Kind: op.Kind, Local: op.Local[at:at], Remote: r, Done: sp}
		hs[i] = wire.Header{Type: typ, Region: r.Region, Key: r.Key, Addr: r.Addr, ID: e.seq.Add(1)}
	}
	if !e.lockLive(op) {
		return
	}
	for i := range sp.checks {
		e.pending[hs[i].ID] = &sp.checks[i]
	}
	e.wg.Add(1) // before Close waits: e.err is nil, and Close sets it first
	e.mu.Unlock()
	go sp.run(k)
	c := e.conns[0]
	for i := range hs {
		if err := c.writeFrame(&hs[i], nil); err != nil {
			e.fail(e.linkErr(err))
			return
		}
	}
}

// run waits for the checks, then sends the slices; it is one of the
// stream's goroutines.
func (sp *spread) run(k int) {
	e := sp.e
	defer e.wg.Done()
	<-sp.ready
	if sp.err != nil {
		complete(sp.op, sp.err)
		return
	}
	n := len(sp.op.Local)
	sp.parts = make([]transport.Op, k)
	hs := make([]wire.Header, k)
	byRef := make([]bool, k)
	for i := range sp.parts {
		lo, hi := sliceBounds(n, k, i)
		r := sp.op.Remote
		r.Addr += uint64(lo)
		part := &sp.parts[i]
		*part = transport.Op{Kind: sp.op.Kind, Local: sp.op.Local[lo:hi], Remote: r, Done: sp, Region: sp.op.Region}
		typ := wire.FrameWrite
		if part.Kind == transport.OpRead {
			typ = wire.FrameRead
		}
		hs[i] = wire.Header{Type: typ, Region: r.Region, Key: r.Key, Addr: r.Addr, Len: uint64(hi - lo), ID: e.seq.Add(1)}
		byRef[i] = sendsByRef(part)
	}
	sp.mu.Lock()
	sp.left = k
	sp.mu.Unlock()
	if !e.lockLive(sp.op) {
		return
	}
	for i := range sp.parts {
		e.pending[hs[i].ID] = &sp.parts[i]
		if byRef[i] {
			if e.byRef == nil {
				e.byRef = make(map[uint64]struct{})
			}
			e.byRef[hs[i].ID] = struct{}{}
		}
	}
	write := sp.op.Kind != transport.OpRead
	if write {
		e.wg.Add(k - 1)
	}
	e.mu.Unlock()
	first := int(e.rr.Add(1))
	for i := range sp.parts {
		c := e.conns[1+(first+i)%(len(e.conns)-1)]
		if !write || i == k-1 {
			// A READ's request is a header; the last WRITE slice is
			// this goroutine's own.
			e.write(c, &hs[i], &sp.parts[i], byRef[i])
			continue
		}
		go func() {
			defer e.wg.Done()
			e.write(c, &hs[i], &sp.parts[i], byRef[i])
		}()
	}
}

// sliceBounds returns slice i of k of n bytes, cut at page boundaries.
func sliceBounds(n, k, i int) (lo, hi int) {
	at := func(j int) int {
		if j == k {
			return n
		}
		return (n / k * j) &^ 4095
	}
	return at(i), at(i + 1)
}

// OpDone completes a check or a slice; when the last check completes, run
// goes on, and when the last slice does, so does the operation.
func (sp *spread) OpDone(part *transport.Op) {
	sp.mu.Lock()
	if part.Err != nil && sp.err == nil {
		sp.err = sp.whole(part.Err)
	}
	sp.left--
	last, err := sp.left == 0, sp.err
	checking := sp.parts == nil
	sp.mu.Unlock()
	switch {
	case !last:
	case checking:
		close(sp.ready)
	default:
		if err == nil {
			sp.e.succeeded(sp.op)
		}
		complete(sp.op, err)
	}
}

// whole turns a refusal of a check or a slice into one of the operation's
// whole range.
func (sp *spread) whole(err error) error {
	var ae *transport.AccessError
	if !errors.As(err, &ae) {
		return err
	}
	w := *ae
	w.Region, w.Addr, w.Len = sp.op.Remote.Region, sp.op.Remote.Addr, uint64(len(sp.op.Local))
	return &w
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
