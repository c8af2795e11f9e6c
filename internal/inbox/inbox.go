// Package inbox is a peer's queue of received messages (SENDs): a
// transport lends each message, the inbox keeps a copy until Take, or
// hands it to a handler that takes messages instead, with no copy. Each
// message remembers the endpoint it came on, the one that is told when it
// is consumed (a peer that moved to another connection may still get
// messages on the old one while it drains).
//
// Deliver is called from the transports' receive paths, Take from any
// number of goroutines; a handler, once set, runs on the receive path, one
// message at a time, in order.
package inbox

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/transport"
)

// Inbox is a queue of received messages. Make it with New.
type Inbox struct {
	mu      sync.Mutex
	handler atomic.Pointer[func([]byte)] // set by Handle
	queue   []msg
	stash   msg // a message Take could not fit, returned first next time
	signal  chan struct{}
}

// msg is a message waiting for Take, and the endpoint it came on.
type msg struct {
	b  []byte
	ep transport.Endpoint
}

// New returns an empty inbox.
func New() *Inbox { return &Inbox{signal: make(chan struct{}, 1)} }

// Signal has a token when a message may have arrived since the last Take
// that found none.
func (q *Inbox) Signal() <-chan struct{} { return q.signal }

// Take copies the next message into buf and tells its endpoint it was
// consumed; ok is false when none waits. When buf is too small, it returns
// an error matching transport.ErrTooLarge that states the size needed, and
// keeps the message for the next Take.
func (q *Inbox) Take(buf []byte) (n int, ok bool, err error) {
	q.mu.Lock()
	m := q.stash
	if m.b != nil {
		q.stash = msg{}
	} else if len(q.queue) > 0 {
		m = q.queue[0]
		q.queue[0] = msg{}
		q.queue = q.queue[1:]
	}
	if m.b == nil {
		q.mu.Unlock()
		return 0, false, nil
	}
	if len(m.b) > len(buf) {
		q.stash = m
		q.mu.Unlock()
		return 0, false, fmt.Errorf("recv: message of %d bytes, buffer of %d: %w", len(m.b), len(buf), transport.ErrTooLarge)
	}
	more := len(q.queue) > 0
	q.mu.Unlock()
	if more {
		q.wake()
	}
	m.ep.Consumed(1) // the endpoint it came on
	return copy(buf, m.b), true, nil
}

// Handler is the function set by Handle, or nil.
func (q *Inbox) Handler() func([]byte) {
	if f := q.handler.Load(); f != nil {
		return *f
	}
	return nil
}

// Deliver queues a copy of msg, lent by ep, for Take; or hands it to the
// handler when Handle ran meanwhile.
func (q *Inbox) Deliver(ep transport.Endpoint, m []byte) {
	q.mu.Lock()
	if f := q.handler.Load(); f != nil { // Handle ran meanwhile
		q.mu.Unlock()
		(*f)(m)
		ep.Consumed(1)
		return
	}
	q.queue = append(q.queue, msg{bytes.Clone(m), ep}) // m is only lent
	q.mu.Unlock()
	q.wake()
}

// Handle makes f receive the messages instead of Take: first those
// waiting, then each as it arrives.
func (q *Inbox) Handle(f func(msg []byte)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// Deliver waits on mu while the queue drains, so order holds.
	if q.stash.b != nil {
		f(q.stash.b)
		q.stash.ep.Consumed(1)
		q.stash = msg{}
	}
	for _, m := range q.queue {
		f(m.b)
		m.ep.Consumed(1) // the endpoint it came on
	}
	q.queue = nil
	q.handler.Store(&f)
}

// Len is the number of messages waiting for Take.
func (q *Inbox) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.queue)
	if q.stash.b != nil {
		n++
	}
	return n
}

func (q *Inbox) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}
