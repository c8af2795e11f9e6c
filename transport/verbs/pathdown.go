package verbs

import (
	"errors"
	"fmt"
	"time"

	"github.com/xferio/xfer/transport"
)

// Failover inside the connection. An endpoint's control stream is a whole
// stream endpoint (tcp's protocol, served against the same Host), so when
// the queue pairs fail while the stream lives (an error completion, a
// failed post, a removed device), an endpoint built with
// Params.OnFailover carries on over the stream instead of failing: the
// same connection, the same peer on both sides, no new handshake.
//
// The move, in order:
//   - the endpoint is marked moving (under e.mu, which alloc checks): no
//     request is posted on a queue pair any more, and the operations
//     posted meanwhile wait, in order, in e.held;
//   - the operations pending on the queue pairs are taken, and the send
//     queues killed, which wakes their waiting posters;
//   - the queue pairs go to the error state, which flushes their
//     receives, and the poller hands over the messages the NIC received
//     before (drainRecvs), so that none is lost or overtaken by the
//     stream's; the peer's frame waits for the same on the stream's read
//     loop (onPathDown);
//   - the queue pairs are destroyed, after the posts under way return
//     (closeQPs holds e.life): from then on the NIC touches none of the
//     operations' buffers;
//   - the peer is told (FramePathDown), so that it moves too rather than
//     wait for its own queue pairs to time out;
//   - the READs and WRITEs taken are posted again on the stream (safe to
//     repeat: the same bytes to the same place), their callers see no
//     error; a message or a write-with-notify in flight fails with
//     ErrPathFailed, since the peer may have had it; an operation the
//     peer's NIC refused fails with that refusal;
//   - what waited in e.held is posted, and the endpoint is on the stream:
//     Transport says "tcp", Post goes to the stream. Messages keep using
//     the endpoint's credits (the peer's receive buffers, returned over
//     the stream as before), so that none is lost across the move.
//
// The endpoint never moves back: the engine pauses rdma for the peer and
// probes it with new connections (its failback), and retires this one.

// The states of an endpoint's data path (Endpoint.path).
const (
	pathRDMA   uint32 = iota // the queue pairs carry the operations
	pathMoving               // moving to the stream; posts are held
	pathStream               // the control stream carries the operations
)

// errMoving is what alloc answers once the endpoint is moving to its
// stream: the caller hands the operation to postStream instead.
var errMoving = errors.New("rdma: moving to the control stream")

// onStream reports whether the endpoint has left its queue pairs.
func (e *Endpoint) onStream() bool { return e.path.Load() != pathRDMA }

// pathFailed handles a failure of the queue pairs: a move to the stream
// when the endpoint may (Params.OnFailover) and its stream lives, else the
// endpoint's failure. The peer's FramePathDown calls it too (fromPeer).
func (e *Endpoint) pathFailed(err error) { e.moveOrFail(err, false) }

func (e *Endpoint) moveOrFail(err error, fromPeer bool) {
	if e.onFailover == nil || e.s == nil {
		e.fail(err)
		return
	}
	e.mu.Lock()
	switch {
	case e.err != nil:
		e.mu.Unlock()
		return // down already
	case e.path.Load() != pathRDMA:
		e.mu.Unlock()
		return // moving already: the queue pairs' last failures
	case e.down != nil:
		e.mu.Unlock()
		e.fail(err) // the stream is gone too
		return
	}
	e.pmu.Lock()
	e.path.Store(pathMoving)
	e.pmu.Unlock()
	ops, errs := e.takePending()
	e.mu.Unlock()
	for _, q := range e.qps {
		q.kill()
	}
	go e.move(ops, errs, err, fromPeer)
}

// move finishes the move to the stream (see above), in its own goroutine:
// it may wait for posters, and the failure that started it may have been
// found in the CQ's poller.
func (e *Endpoint) move(ops []*transport.Op, errs []error, cause error, fromPeer bool) {
	// The messages the NIC received before the failure are delivered
	// before any that comes on the stream: the queue pairs go to the
	// error state, which flushes their receives after those, and the
	// poller hands them all over before the queue pairs go.
	e.life.RLock()
	if !e.released {
		for _, q := range e.qps {
			q.qp.ToError()
		}
	}
	e.life.RUnlock()
	e.drainRecvs()
	e.closeQPs()
	if !fromPeer {
		if err := e.s.PathDown(); err != nil {
			e.fail(err)
		}
	}
	repost := make([]*transport.Op, 0, len(ops))
	for i, op := range ops {
		switch {
		case errs[i] != nil && errors.Is(errs[i], transport.ErrRemoteAccess):
			complete(op, errs[i])
		case op.Kind == transport.OpRead || op.Kind == transport.OpWrite:
			repost = append(repost, op)
		default:
			complete(op, fmt.Errorf("rdma %s: %w: it was in flight when the queue pairs failed (%v), and the peer may have had it; the connection carries on over tcp", op.Kind, transport.ErrPathFailed, cause))
		}
	}
	e.streamPost(repost, false)
	for {
		e.pmu.Lock()
		held := e.held
		e.held = nil
		if len(held) == 0 {
			e.path.Store(pathStream)
			e.pmu.Unlock()
			break
		}
		e.pmu.Unlock()
		e.streamPost(held, false)
	}
	// Messages that waited for credit go on the stream as credit comes.
	e.onCredit(0)
	reason := cause
	if fromPeer {
		reason = fmt.Errorf("the peer's rdma path failed: %w", cause)
	}
	if l := e.dev.log; l != nil {
		l.Debug("rdma: queue pairs failed; the connection carries on over its control stream", "device", e.dev.info.Name, "reason", reason, "repeated", len(repost), "failed", len(ops)-len(repost))
	}
	e.onFailover("rdma", "tcp", reason)
}

// postStream posts ops on the stream once the endpoint moved there, or
// holds them while it moves.
func (e *Endpoint) postStream(ops []*transport.Op, wait bool) {
	e.pmu.Lock()
	if e.path.Load() == pathMoving {
		e.held = append(e.held, ops...)
		e.pmu.Unlock()
		return
	}
	e.pmu.Unlock()
	e.streamPost(ops, wait)
}

// streamPost posts ops on the control stream. Messages take the
// endpoint's own credits (the peer's receive buffers), and wait for
// them in e.sendWait as on the queue pairs.
func (e *Endpoint) streamPost(ops []*transport.Op, wait bool) {
	if err := e.failed(); err != nil {
		for _, op := range ops {
			complete(op, err)
		}
		return
	}
	var rest []*transport.Op
	for _, op := range ops {
		switch {
		case op.Region != nil && !op.Region.Location().IsHost():
			complete(op, fmt.Errorf("rdma %s: %w: GPU memory cannot travel on the control stream the connection moved to after its queue pairs failed; the engine stages it on its next operation", op.Kind, transport.ErrPathFailed))
		case op.Kind == transport.OpSend:
			if len(rest) > 0 {
				e.s.Post(rest, false)
				rest = rest[:0]
			}
			e.cmu.Lock()
			if e.credits == 0 || len(e.sendWait) > 0 {
				e.sendWait = append(e.sendWait, op)
			} else {
				e.credits--
				e.s.Post([]*transport.Op{op}, false)
			}
			e.cmu.Unlock()
		default:
			rest = append(rest, op)
		}
	}
	if len(rest) > 0 {
		e.s.Post(rest, wait && len(rest) == len(ops))
	}
}

// reject completes op with err, unless the endpoint is moving to (or is
// on) its stream: then op goes there.
//
// An operation refused because the device is gone (its registrations went
// with it) takes the queue pairs down first, as the device's removal will
// a moment later: the endpoint moves to its stream, or fails, before the
// operation completes, so whoever sees the error finds the endpoint failed
// (a rail's WRITEs and READs are repeated on the other rails on that sign).
func (e *Endpoint) reject(op *transport.Op, err error) {
	if !e.onStream() && e.failed() == nil && e.dev.removed() {
		e.pathFailed(e.linkErr(err))
	}
	if e.onStream() && e.failed() == nil {
		e.postStream([]*transport.Op{op}, false)
		return
	}
	complete(op, err)
}

// onPathDown is the peer's FramePathDown: its queue pairs failed. It runs
// on the stream's read loop, and returns once the messages received on the
// queue pairs are delivered: the peer's messages after the frame come on
// the stream, and must not overtake them.
func (e *Endpoint) onPathDown() {
	e.moveOrFail(&transport.LinkError{Peer: "rdma peer", Cause: errors.New("the peer's queue pairs failed")}, true)
	if e.onStream() {
		e.drainRecvs()
	}
}

// recvDrainMax bounds the wait for the receives of failed queue pairs to
// be handled; srqDrainGrace is the wait with a shared receive queue, whose
// receives a queue pair's failure does not flush: it gives the poller
// time for the completions already in the queue.
const (
	recvDrainMax  = time.Second
	srqDrainGrace = 20 * time.Millisecond
)

// drainRecvs waits until every receive posted on the failed queue pairs
// was handled (a message delivered, or flushed), the queue pairs are
// released (a removed device completes nothing more), or recvDrainMax
// passed.
func (e *Endpoint) drainRecvs() {
	if e.cfg.UseSRQ {
		time.Sleep(srqDrainGrace)
		return
	}
	deadline := time.Now().Add(recvDrainMax)
	for e.recvOut.Load() > 0 && !e.qpsReleased() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// qpsReleased reports whether the queue pairs are gone, and with them what
// they could still complete (a removed device releases them at once).
func (e *Endpoint) qpsReleased() bool {
	e.life.RLock()
	defer e.life.RUnlock()
	return e.released
}

// unalloc frees the pending slot of an operation that was not posted, if
// it is still the operation's (a move to the stream may have taken it).
func (e *Endpoint) unalloc(slot, gen uint32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := &e.pend[slot]
	if p.op == nil || p.gen != gen {
		return false
	}
	p.op = nil
	e.freeIDs = append(e.freeIDs, slot)
	return true
}
