//go:build cgo

package ibv

/*
#cgo noescape xibv_poll_cq
#cgo nocallback xibv_poll_cq
#cgo nocallback xibv_req_notify_cq
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"github.com/xferio/xfer/internal/sys"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// CompChannel is a completion event channel (struct ibv_comp_channel): CQs
// created on it report, after ReqNotify, that they have new completions.
type CompChannel struct {
	c   *C.struct_ibv_comp_channel
	ctx *Context
	w   *sys.FDWaiter

	mu  sync.Mutex
	cqs map[*C.struct_ibv_cq]*CQ
}

// CreateCompChannel creates a completion channel. Its fd is non-blocking.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if c == nil || c.c == nil {
		return nil, ErrClosed
	}
	ch, err := C.xibv_create_comp_channel(c.c)
	if ch == nil {
		return nil, fmt.Errorf("ibv_create_comp_channel on %s: %w", c.name, errnoErr(err, syscall.ENOMEM))
	}
	w, err := sys.NewFDWaiter(int(ch.fd), "ibv_comp_channel "+c.name)
	if err != nil {
		C.xibv_destroy_comp_channel(ch)
		return nil, fmt.Errorf("ibv_create_comp_channel on %s: %w", c.name, err)
	}
	live.channels.Add(1)
	c.children.Add(1)
	return &CompChannel{c: ch, ctx: c, w: w, cqs: map[*C.struct_ibv_cq]*CQ{}}, nil
}

// FD returns the channel's file descriptor, which is non-blocking. Prefer
// WaitEvent, which parks on Go's poller; an external poller may watch the fd
// for readability and then call WaitEvent, which will not block.
func (ch *CompChannel) FD() int {
	if ch == nil || ch.c == nil {
		return -1
	}
	return int(ch.c.fd)
}

// GetEvent waits for the next completion event and returns its CQ, like
// ibv_get_cq_event. Acknowledge the event with the CQ's AckEvents and re-arm
// it with ReqNotify.
func (ch *CompChannel) GetEvent() (*CQ, error) { return ch.WaitEvent(context.Background()) }

// WaitEvent is GetEvent that gives up when ctx ends.
func (ch *CompChannel) WaitEvent(ctx context.Context) (*CQ, error) {
	return ch.wait(ctx, time.Time{})
}

// GetEventTimeout is GetEvent that gives up after timeout with an error
// matching os.ErrDeadlineExceeded.
func (ch *CompChannel) GetEventTimeout(timeout time.Duration) (*CQ, error) {
	return ch.wait(context.Background(), time.Now().Add(timeout))
}

func (ch *CompChannel) wait(ctx context.Context, deadline time.Time) (*CQ, error) {
	if ch == nil || ch.c == nil {
		return nil, ErrClosed
	}
	var cq *C.struct_ibv_cq
	err := closedErr(ch.w.Wait(ctx, deadline, func() (bool, error) {
		rc, err := C.xibv_get_cq_event(ch.c, &cq)
		if rc == 0 {
			return true, nil
		}
		if e := errnoErr(err, syscall.EIO); e != syscall.EAGAIN {
			return true, e
		}
		return false, nil
	}))
	if err != nil {
		return nil, fmt.Errorf("ibv_get_cq_event on %s: %w", ch.ctx.name, err)
	}
	ch.mu.Lock()
	g := ch.cqs[cq]
	ch.mu.Unlock()
	if g == nil {
		C.xibv_ack_cq_events(cq, 1)
		return nil, fmt.Errorf("ibv_get_cq_event on %s: event for an unknown CQ: %w", ch.ctx.name, syscall.EINVAL)
	}
	g.events.Add(1)
	return g, nil
}

// Close destroys the channel and wakes a waiter with ErrClosed. It fails,
// and the channel stays open, while CQs use it.
func (ch *CompChannel) Close() error {
	if ch == nil || ch.c == nil {
		return nil
	}
	ch.mu.Lock()
	n := len(ch.cqs)
	ch.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("ibv_destroy_comp_channel on %s: %d CQs still use it: %w", ch.ctx.name, n, syscall.EBUSY)
	}
	ch.w.Close()
	rc, err := C.xibv_destroy_comp_channel(ch.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_destroy_comp_channel on %s: %w", ch.ctx.name, e)
	}
	ch.c = nil
	live.channels.Add(-1)
	ch.ctx.children.Add(-1)
	return nil
}

// CQ is a completion queue (struct ibv_cq).
type CQ struct {
	c      *C.struct_ibv_cq
	ctx    *Context
	ch     *CompChannel
	buf    *C.struct_ibv_wc // bufCap entries of C memory for Poll
	bufCap int
	cqe    int
	events atomic.Int64 // events taken from the channel and not yet acked
}

// maxPollBatch caps the completions one Poll call takes.
const maxPollBatch = 256

// CreateCQ creates a CQ with room for at least cqe completions (default
// 256), reporting events to ch if it is not nil.
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if c == nil || c.c == nil {
		return nil, ErrClosed
	}
	if cqe <= 0 {
		cqe = 256
	}
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		if ch.c == nil {
			return nil, fmt.Errorf("ibv_create_cq on %s: channel: %w", c.name, ErrClosed)
		}
		cch = ch.c
	}
	q, err := C.xibv_create_cq(c.c, C.int(cqe), cch)
	if q == nil {
		return nil, fmt.Errorf("ibv_create_cq %d entries on %s: %w", cqe, c.name, errnoErr(err, syscall.ENOMEM))
	}
	cq := &CQ{c: q, ctx: c, ch: ch, cqe: int(q.cqe)}
	cq.bufCap = min(max(cq.cqe, 1), maxPollBatch)
	cq.buf = (*C.struct_ibv_wc)(C.calloc(C.size_t(cq.bufCap), C.sizeof_struct_ibv_wc))
	if cq.buf == nil {
		C.xibv_destroy_cq(q)
		return nil, fmt.Errorf("ibv_create_cq on %s: %w", c.name, syscall.ENOMEM)
	}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[q] = cq
		ch.mu.Unlock()
	}
	live.cqs.Add(1)
	c.children.Add(1)
	return cq, nil
}

// CQE returns the number of entries the CQ was granted.
func (cq *CQ) CQE() int {
	if cq == nil {
		return 0
	}
	return cq.cqe
}

// Poll takes up to len(wcs) completions, at most 256 per call, and returns
// how many it wrote. It does not block and does not allocate.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	if cq == nil || cq.c == nil {
		return 0, ErrClosed
	}
	n := min(len(wcs), cq.bufCap)
	if n == 0 {
		return 0, nil
	}
	k := C.xibv_poll_cq(handle(unsafe.Pointer(cq.c)), handle(unsafe.Pointer(cq.buf)), C.int(n), (*C.struct_xfer_wc)(unsafe.Pointer(&wcs[0])))
	if k < 0 {
		return 0, cq.pollError(int(k))
	}
	return int(k), nil
}

func (cq *CQ) pollError(k int) error {
	return fmt.Errorf("ibv_poll_cq on %s: failed with %d: %w", cq.ctx.name, k, syscall.EIO)
}

// ReqNotify arms the CQ: the channel gets an event for the next completion
// (or the next solicited one). Poll once more after arming, or a completion
// that arrived just before may go unnoticed.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq == nil || cq.c == nil {
		return ErrClosed
	}
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	if rc := C.xibv_req_notify_cq(handle(unsafe.Pointer(cq.c)), s); rc != 0 {
		return cq.notifyError(int(rc))
	}
	return nil
}

func (cq *CQ) notifyError(rc int) error {
	return fmt.Errorf("ibv_req_notify_cq on %s: %w", cq.ctx.name, syscall.Errno(rc))
}

// AckEvents acknowledges n events that GetEvent returned for this CQ.
// Close acknowledges what is left.
func (cq *CQ) AckEvents(n int) {
	if cq == nil || cq.c == nil || n <= 0 {
		return
	}
	if un := int(cq.events.Load()); n > un {
		n = un
	}
	if n == 0 {
		return
	}
	C.xibv_ack_cq_events(cq.c, C.uint(n))
	cq.events.Add(int64(-n))
}

// Close destroys the CQ. It fails, and the CQ stays open, while a QP uses it.
func (cq *CQ) Close() error {
	if cq == nil || cq.c == nil {
		return nil
	}
	cq.AckEvents(int(cq.events.Load()))
	rc, err := C.xibv_destroy_cq(cq.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_destroy_cq on %s: %w", cq.ctx.name, e)
	}
	if cq.ch != nil {
		cq.ch.mu.Lock()
		delete(cq.ch.cqs, cq.c)
		cq.ch.mu.Unlock()
	}
	C.free(unsafe.Pointer(cq.buf))
	cq.c, cq.buf = nil, nil
	live.cqs.Add(-1)
	cq.ctx.children.Add(-1)
	return nil
}

// closedErr maps a waiter's os.ErrClosed to the package's ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// handle passes a pointer to C memory (a verbs object, a ring, a
// completion buffer) to the data path's wrappers as an integer, which cgo
// does not check for Go pointers on each call (see shim.h).
func handle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }
