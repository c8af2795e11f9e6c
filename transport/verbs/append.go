package verbs

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/transport"
)

// Messages encoded in place (transport.Appender). A request/response
// protocol answers from its receive path (the connector's answers, the KV
// service's): the answer is encoded straight into one of the endpoint's
// registered send buffers, a part of its ring after the fence byte, and
// posted as a SEND from there, under the same credits and in the same
// order as the endpoint's other messages. No goroutine is started, no
// buffer taken from the pool, and nobody waits for the SEND's completion:
// the completion hands the buffer back. Without a free buffer, a credit,
// or while messages wait for credit, AppendSend reports false and the
// caller sends the message as an OpSend.

// appendSlots is how many AppendSend messages an endpoint may have in
// flight at once; appendMax bounds each one (and max_message too).
const (
	appendSlots = 8
	appendMax   = 16 << 10
)

// appendBuf is one send buffer of the ring, and the operation that sends
// from it; its completion returns it to the endpoint's free list.
type appendBuf struct {
	e   *Endpoint
	off int // in the ring
	op  transport.Op
}

func (a *appendBuf) OpDone(*transport.Op) {
	a.op.Local, a.op.Err = nil, nil
	a.e.apMu.Lock()
	a.e.apFree = append(a.e.apFree, a)
	a.e.apMu.Unlock()
}

// appendState is the endpoint's part of AppendSend.
type appendState struct {
	apSize int // bytes per buffer
	apMu   sync.Mutex
	apFree []*appendBuf
}

// appendLen is the ring's room for the send buffers of messages of size
// bytes at most.
func appendLen(size int) int { return appendSlots * min(size, appendMax) }

// initAppend lays the send buffers out at off in the ring.
func (e *Endpoint) initAppend(off, size int) {
	e.apSize = min(size, appendMax)
	e.apFree = make([]*appendBuf, 0, appendSlots)
	for i := range appendSlots {
		a := &appendBuf{e: e, off: off + i*e.apSize}
		a.op.Kind = transport.OpSend
		a.op.Done = a
		e.apFree = append(e.apFree, a)
	}
}

// AppendSend implements transport.Appender.
func (e *Endpoint) AppendSend(max int, fill func(b []byte) []byte) (bool, error) {
	if max > min(e.apSize, e.maxMessage) || e.path.Load() != pathRDMA {
		return false, nil
	}
	e.cmu.Lock()
	defer e.cmu.Unlock()
	if e.credits == 0 || len(e.sendWait) > 0 {
		return false, e.failed()
	}
	e.apMu.Lock()
	k := len(e.apFree)
	if k == 0 {
		e.apMu.Unlock()
		return false, nil
	}
	a := e.apFree[k-1]
	e.apFree = e.apFree[:k-1]
	e.apMu.Unlock()
	// The ring outlives the QPs (release); holding life keeps it mapped
	// while fill writes into it.
	e.life.RLock()
	if e.released {
		e.life.RUnlock()
		a.OpDone(&a.op)
		return false, errReleased
	}
	buf := e.ring.Bytes()[a.off : a.off : a.off+e.apSize]
	b := fill(buf)
	e.life.RUnlock()
	if len(b) > max || len(b) > 0 && unsafe.SliceData(b) != unsafe.SliceData(buf[:1]) {
		a.OpDone(&a.op)
		return false, fmt.Errorf("rdma: a message appended in place took %d bytes, at most %d: %w", len(b), max, transport.ErrTooLarge)
	}
	a.op.Local = b
	wr := ibv.SendWR{Op: ibv.OpSend, Flags: ibv.FlagSignaled}
	if n := len(b); n > 0 {
		wr.SGE = ibv.SGE{Addr: uint64(e.ring.Addr()) + uint64(a.off), Len: uint32(n), LKey: e.ringMR.LKey}
		if n <= e.cfg.MaxInlineData {
			wr.Flags |= ibv.FlagInline
		}
	}
	e.credits--
	if _, _, posted := e.sendNow(&a.op, wr); posted {
		return true, nil
	}
	// Queued to go out on the control stream the connection is moving to,
	// which may outlive the ring: it goes with a copy.
	for _, op := range e.sendWait {
		if op == &a.op {
			a.op.Local = append([]byte(nil), b...)
			return true, nil
		}
	}
	// Not posted: the endpoint failed (the buffer is back).
	return false, e.failed()
}
