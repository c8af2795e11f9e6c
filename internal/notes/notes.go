// Package notes is the engine's queue of notifications: what peers' writes
// with notify and their losses leave for the application to take.
//
// The transports' read loops push into it and must never block on a slow
// consumer, so the queue is unbounded; what bounds it is the application
// taking. A peer's loss is queued behind the notifications that peer sent
// before it, once a waiter has asked for losses (Wait), and at most once a
// peer until it is taken.
package notes

import (
	"context"
	"sync"
	"sync/atomic"
)

// MaxLost bounds the losses of peers queued at once: past it, more are not
// reported.
const MaxLost = 1024

// Queue holds notifications N from peers P. Its zero value is not ready:
// call Init.
type Queue[P comparable, N any] struct {
	mu     sync.Mutex
	q      []item[P, N]
	head   int
	signal chan struct{}
	done   chan struct{}
	once   sync.Once
	// changed, when not nil, is closed at the next push: TakeFrom's
	// waiters, each looking for its own peer's, all wake.
	changed chan struct{}
	// used is set by the first Wait: from then on losses are queued; lost
	// holds the peers whose loss is queued (one each).
	used atomic.Bool
	lost map[P]struct{}
	// waiting counts the goroutines in Wait.
	waiting atomic.Int32
}

// item is a notification from a peer, or, when lost is not nil, the loss
// of that peer.
type item[P comparable, N any] struct {
	from P
	note N
	lost error
}

// Init makes the queue ready.
func (q *Queue[P, N]) Init() {
	q.signal = make(chan struct{}, 1)
	q.done = make(chan struct{})
}

// Push queues note from peer.
func (q *Queue[P, N]) Push(from P, note N) { q.add(item[P, N]{from: from, note: note}) }

func (q *Queue[P, N]) add(it item[P, N]) {
	q.mu.Lock()
	q.q = append(q.q, it)
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
	q.mu.Unlock()
	q.kick()
}

func (q *Queue[P, N]) kick() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Lost queues the loss of peer, whose connection failed with err, once
// Wait has been used, and unless that peer's loss is queued already.
func (q *Queue[P, N]) Lost(peer P, err error) {
	if !q.used.Load() {
		return
	}
	q.mu.Lock()
	if _, ok := q.lost[peer]; ok || len(q.lost) >= MaxLost {
		q.mu.Unlock()
		return
	}
	if q.lost == nil {
		q.lost = make(map[P]struct{})
	}
	q.lost[peer] = struct{}{}
	q.mu.Unlock()
	q.add(item[P, N]{from: peer, lost: err})
}

// Wait takes the first item: a notification (lost is nil), or the loss of
// the peer from (lost is the connection's error). It returns ctx's error
// when ctx ends first, and closed once Close is called.
func (q *Queue[P, N]) Wait(ctx context.Context, closed error) (from P, note N, lost, err error) {
	q.used.Store(true)
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	for {
		q.mu.Lock()
		if q.head < len(q.q) {
			it := q.q[q.head]
			q.q[q.head] = item[P, N]{}
			q.head++
			if q.head == len(q.q) {
				q.q, q.head = q.q[:0], 0
			}
			more := q.head < len(q.q)
			if it.lost != nil {
				delete(q.lost, it.from)
			}
			q.mu.Unlock()
			if more {
				q.kick()
			}
			return it.from, it.note, it.lost, nil
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-ctx.Done():
			return from, note, nil, ctx.Err()
		case <-q.done:
			return from, note, nil, closed
		}
	}
}

// Waiting reports whether a goroutine is in Wait.
func (q *Queue[P, N]) Waiting() bool { return q.waiting.Load() > 0 }

// TakeFrom removes and returns the first notification from peer; when there
// is none, it returns a channel closed at the next push. It leaves peer's
// loss, if queued, to Wait.
func (q *Queue[P, N]) TakeFrom(peer P) (N, bool, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := q.head; i < len(q.q); i++ {
		if it := q.q[i]; it.from == peer && it.lost == nil {
			copy(q.q[i:], q.q[i+1:])
			q.q[len(q.q)-1] = item[P, N]{}
			q.q = q.q[:len(q.q)-1]
			if q.head == len(q.q) {
				q.q, q.head = q.q[:0], 0
			}
			return it.note, true, nil
		}
	}
	if q.changed == nil {
		q.changed = make(chan struct{})
	}
	var zero N
	return zero, false, q.changed
}

// Close ends every Wait, now and later.
func (q *Queue[P, N]) Close() { q.once.Do(func() { close(q.done) }) }
