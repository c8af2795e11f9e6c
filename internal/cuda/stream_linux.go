//go:build cgo && linux

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/xferio/xfer/bytesize"
)

// Stream is a CUDA stream of a Context: work queued on it runs in order,
// and concurrently with other streams. It does not synchronise with the
// legacy default stream (CU_STREAM_NON_BLOCKING).
type Stream struct {
	mu  sync.RWMutex // held for reading by calls, for writing by Close
	s   C.CUstream   // nil once closed
	c   *Context
	ctx C.CUcontext // c's, which outlives the stream (Context.Close refuses while it is open)
}

// NewStream creates a stream (cuStreamCreate with CU_STREAM_NON_BLOCKING).
func (c *Context) NewStream() (*Stream, error) {
	ctx, err := c.lock("cuStreamCreate")
	if err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	s := &Stream{c: c, ctx: ctx}
	if rc := C.xcu_stream_create(ctx, &s.s); rc != C.CUDA_SUCCESS {
		return nil, c.fail(rc, "cuStreamCreate")
	}
	c.streams.Add(1)
	return s, nil
}

// lock read-locks s for a call; see Context.lock.
func (s *Stream) lock(op string) (C.CUstream, error) {
	if s == nil {
		return nil, closedErr(op)
	}
	s.mu.RLock()
	if s.s == nil {
		s.mu.RUnlock()
		return nil, closedErr(op + " on a stream of " + s.c.name)
	}
	return s.s, nil
}

func (s *Stream) fail(rc C.CUresult, op string) error {
	return newError(rc, op+" on a stream of "+s.c.name)
}

// CopyAsync queues a copy of n bytes from src to dst on the stream
// (cuMemcpyAsync), in any direction, and returns without waiting for it.
// Both buffers must stay valid until the copy is done (Sync, or an Event
// recorded after it). Copies from or to host memory are only asynchronous
// when that memory is registered (HostRegister).
func (s *Stream) CopyAsync(dst, src uintptr, n int) error {
	if n < 0 {
		return errNegative("cuMemcpyAsync", n)
	}
	st, err := s.lock("cuMemcpyAsync")
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if rc := C.xcu_memcpy_async(s.ctx, st, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)); rc != C.CUDA_SUCCESS {
		return s.fail(rc, fmt.Sprintf("cuMemcpyAsync %s from %#x to %#x", bytesize.Human(int64(n)), src, dst))
	}
	return nil
}

// Sync waits until all work queued on the stream is done
// (cuStreamSynchronize), blocking the calling OS thread.
func (s *Stream) Sync() error {
	st, err := s.lock("cuStreamSynchronize")
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if rc := C.xcu_stream_sync(s.ctx, st); rc != C.CUDA_SUCCESS {
		return s.fail(rc, "cuStreamSynchronize")
	}
	return nil
}

// Close destroys the stream (cuStreamDestroy); work already queued on it
// still completes. It is idempotent and nil-safe.
func (s *Stream) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return nil
	}
	st := s.s
	s.s = nil
	s.c.streams.Add(-1)
	if rc := C.xcu_stream_destroy(s.ctx, st); rc != C.CUDA_SUCCESS {
		return s.fail(rc, "cuStreamDestroy")
	}
	return nil
}

// Event marks a point in a stream's work, to wait for or poll
// (cuEventCreate with CU_EVENT_DISABLE_TIMING: it does not time).
type Event struct {
	mu  sync.RWMutex // held for reading by calls, for writing by Close
	e   C.CUevent    // nil once closed
	c   *Context
	ctx C.CUcontext
}

// NewEvent creates an event (cuEventCreate with CU_EVENT_DISABLE_TIMING).
// An event that was never recorded is done.
func (c *Context) NewEvent() (*Event, error) {
	ctx, err := c.lock("cuEventCreate")
	if err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	e := &Event{c: c, ctx: ctx}
	if rc := C.xcu_event_create(ctx, &e.e); rc != C.CUDA_SUCCESS {
		return nil, c.fail(rc, "cuEventCreate")
	}
	c.events.Add(1)
	return e, nil
}

// lock read-locks e for a call; see Context.lock.
func (e *Event) lock(op string) (C.CUevent, error) {
	if e == nil {
		return nil, closedErr(op)
	}
	e.mu.RLock()
	if e.e == nil {
		e.mu.RUnlock()
		return nil, closedErr(op + " on an event of " + e.c.name)
	}
	return e.e, nil
}

func (e *Event) fail(rc C.CUresult, op string) error {
	return newError(rc, op+" on an event of "+e.c.name)
}

// Record marks the event at the current end of s's work (cuEventRecord):
// it becomes done when the work queued on s so far is done. s must belong
// to the same Context.
func (e *Event) Record(s *Stream) error {
	ev, err := e.lock("cuEventRecord")
	if err != nil {
		return err
	}
	defer e.mu.RUnlock()
	st, err := s.lock("cuEventRecord")
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if rc := C.xcu_event_record(e.ctx, ev, st); rc != C.CUDA_SUCCESS {
		return e.fail(rc, "cuEventRecord")
	}
	return nil
}

// Sync waits until the event is done (cuEventSynchronize), blocking the
// calling OS thread.
func (e *Event) Sync() error {
	ev, err := e.lock("cuEventSynchronize")
	if err != nil {
		return err
	}
	defer e.mu.RUnlock()
	if rc := C.xcu_event_sync(e.ctx, ev); rc != C.CUDA_SUCCESS {
		return e.fail(rc, "cuEventSynchronize")
	}
	return nil
}

// Done reports, without blocking, whether the event is done
// (cuEventQuery: CUDA_SUCCESS is done, CUDA_ERROR_NOT_READY is not yet).
func (e *Event) Done() (bool, error) {
	ev, err := e.lock("cuEventQuery")
	if err != nil {
		return false, err
	}
	defer e.mu.RUnlock()
	switch rc := C.xcu_event_query(e.ctx, ev); rc {
	case C.CUDA_SUCCESS:
		return true, nil
	case C.CUDA_ERROR_NOT_READY:
		return false, nil
	default:
		return false, e.fail(rc, "cuEventQuery")
	}
}

// Close destroys the event (cuEventDestroy). It is idempotent and nil-safe.
func (e *Event) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e == nil {
		return nil
	}
	ev := e.e
	e.e = nil
	e.c.events.Add(-1)
	if rc := C.xcu_event_destroy(e.ctx, ev); rc != C.CUDA_SUCCESS {
		return e.fail(rc, "cuEventDestroy")
	}
	return nil
}
