package batch

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Call is one synchronous operation; calls are pooled so that a steady
// stream of Write and Read allocates nothing.
type Call struct {
	Op   transport.Op
	ops  [1]*transport.Op
	done chan struct{}
	// state is callRunning from the post, callWaiting once the caller
	// blocks on done, then callDone (OpDone sends on done only when the
	// caller waits there: an operation that completes before the caller
	// looks, as a synchronous poll or a shared-memory copy does, costs no
	// channel operation) or callAbandoned (its context ended and the
	// transport could not take the operation back: OpDone releases what
	// the operation holds, lr and release, and returns the call to the
	// pool).
	state   atomic.Uint32
	lr      *mem.Handle // an abandoned operation's pinned region
	release func()      // an abandoned operation's hold on the pool's bytes
	// sample counts down to the next operation timed for the latency
	// histograms: one in the connection's Every (metrics.SampleEvery) of those
	// each call carries, with no atomic and no random draw (the metrics).
	sample uint8
}

var callPool = sync.Pool{New: func() any {
	c := &Call{done: make(chan struct{}, 1), sample: uint8(1 + rand.N(metrics.LatencyEvery))}
	c.ops[0] = &c.Op
	c.Op.Done = c
	return c
}}

// The states of a call.
const (
	callRunning uint32 = iota
	callWaiting
	callDone
	callAbandoned
)

// GetCall returns a call from the pool, running.
func GetCall() *Call {
	c := callPool.Get().(*Call)
	c.state.Store(callRunning)
	return c
}

// Put returns c, done or never posted, to the pool.
func (c *Call) Put() {
	c.Op.Local, c.Op.Err, c.Op.Region = nil, nil, nil
	callPool.Put(c)
}

// Ops is c's operation, as Endpoint.Post takes it.
func (c *Call) Ops() []*transport.Op { return c.ops[:] }

func (c *Call) OpDone(*transport.Op) {
	if c.state.CompareAndSwap(callRunning, callDone) {
		return // the caller has not looked yet: it finds callDone
	}
	if c.state.CompareAndSwap(callWaiting, callDone) {
		c.done <- struct{}{}
		return
	}
	// Abandoned: the caller has returned. The transport is done with the
	// memory now: release it.
	lr, release := c.lr, c.release
	c.lr, c.release = nil, nil
	c.Op.Local, c.Op.Err, c.Op.Region = nil, nil, nil
	release()
	lr.Unpin()
	callPool.Put(c)
}

// Wait marks the caller as waiting for the operation, and returns the
// channel that then has a token when it is done; nil when it is done
// already (OpDone ran during the post, or since).
func (c *Call) Wait() <-chan struct{} {
	if !c.state.CompareAndSwap(callRunning, callWaiting) {
		return nil
	}
	return c.done
}

// Timed reports whether this operation is one of those timed for the
// latency histograms.
func (c *Call) Timed(every uint8) bool {
	c.sample--
	if c.sample == 0 {
		c.sample = every
		return true
	}
	return false
}

// Abandon gives up waiting for c's operation, which the transport could
// not take back, unless it completed meanwhile (false: c's channel has its
// token). The operation keeps its region pinned (lr) and its bytes held
// (release); OpDone releases both once the transport is done (the
// operation completes, or its connection fails and flushes it).
func (c *Call) Abandon(lr *mem.Handle, release func()) bool {
	c.lr, c.release = lr, release
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return true
	}
	c.lr, c.release = nil, nil
	release()
	return false
}
