package connector

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
)

// remote is a producer this connector dialed: its pending gets by id.
type remote struct {
	peer  *xfer.Peer
	mu    sync.Mutex
	next  uint32
	calls map[uint32]*pending
	// noInline is set once the producer refused a get asking for an
	// inline value (a producer from before inline values): its gets ask
	// no more.
	noInline atomic.Bool
	// rels are releases held back for the next get to carry
	// (flagReleases), carriedLen bytes each; relTimer sends them alone
	// when no get has carried them within releaseDelay.
	relMu    sync.Mutex
	rels     []byte
	relTimer *time.Timer
	relArmed bool
	// noCarry is set once the producer refused a get carrying releases (a
	// producer from before carried releases): releases go to it alone.
	noCarry atomic.Bool
}

// releaseDelay bounds how long a release waits for a get to the same
// producer to carry it. A stream of gets sends one message each way per
// get; a lone get's release leaves within about a millisecond (Go's timers
// are that coarse on an idle process).
const releaseDelay = 500 * time.Microsecond

// pending is a get waiting for its end. dst, when set, is the buffer an
// inline value of its length goes to, copied there on the receive path.
type pending struct {
	ch  chan result
	dst []byte
}

// result ends a pending get: an answer, the notification that a written
// value is in place, or an error. An answer with an inline value has it in
// the get's dst (inDst) or in rep.data, a copy.
type result struct {
	rep      reply
	notified bool
	inDst    bool
	err      error
}

func (r *remote) newCall(dst []byte) (uint32, chan result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		r.next++
		if _, busy := r.calls[r.next]; !busy {
			pc := &pending{ch: make(chan result, 1), dst: dst}
			r.calls[r.next] = pc
			return r.next, pc.ch
		}
	}
}

// deliver ends the get id; it reports false when there is no such get. It
// runs on the receive path: an inline value (res.rep.data, in the message)
// is copied out before it returns, under r.mu, so that the get's buffer is
// not freed meanwhile (a get that gives up forgets itself under r.mu).
func (r *remote) deliver(id uint32, res result) bool {
	r.mu.Lock()
	pc, ok := r.calls[id]
	delete(r.calls, id)
	if ok && res.rep.data != nil {
		if len(pc.dst) == len(res.rep.data) {
			copy(pc.dst, res.rep.data)
			res.rep.data, res.inDst = nil, true
		} else {
			res.rep.data = bytes.Clone(res.rep.data)
		}
	}
	r.mu.Unlock()
	if ok {
		pc.ch <- res
	}
	return ok
}

func (r *remote) forget(id uint32) {
	r.mu.Lock()
	delete(r.calls, id)
	r.mu.Unlock()
}

func (r *remote) failAll(err error) {
	r.mu.Lock()
	calls := r.calls
	r.calls = map[uint32]*pending{}
	r.mu.Unlock()
	for _, pc := range calls {
		pc.ch <- result{err: err}
	}
}
