package connector

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
)

// A consumer's calls to a producer: call sends a get and waits for its
// answer, which onReply delivers, and the claims it leaves are released
// afterwards, carried by the next get where they can be.

// call sends a get and waits for its end. When ctx ends or the connection
// fails first, the get is abandoned: the producer is told, and late hands
// whatever still arrives for it (to release a claim, free a buffer).
// dst is where an inline value of its length goes (nil: none).
// A get carries the releases held back for its producer; any other
// message goes after them.
func (c *Connector) call(ctx context.Context, r *remote, dst []byte, msg func(id uint32) []byte, late func(result)) (result, error) {
	res, carried, err := c.callOnce(ctx, r, dst, msg, late)
	if len(carried) > 0 && err == nil && res.rep.status == statusRefused && strings.Contains(res.rep.msg, "unknown flags") {
		// A producer from before carried releases refused the whole get:
		// the releases go alone, now and from now on, and the get again.
		r.noCarry.Store(true)
		c.sendReleases(r, carried)
		return c.call(ctx, r, dst, msg, late)
	}
	return res, err
}

// callOnce is call, less asking an older producer again; it also returns
// the releases its get carried.
func (c *Connector) callOnce(ctx context.Context, r *remote, dst []byte, msg func(id uint32) []byte, late func(result)) (result, []byte, error) {
	id, ch := r.newCall(dst)
	m := msg(id)
	var carried []byte
	if m[0] == msgGet {
		m, carried = c.carry(r, m)
	} else {
		c.sendReleases(r, nil)
	}
	if err := c.send(ctx, r.peer, m); err != nil {
		r.forget(id)
		if len(carried) > 0 {
			c.sendReleases(r, carried)
		}
		return result{}, nil, err
	}
	// The connection the get left on: Send may have dialed a new one.
	down := r.peer.Down()
	if c.spin > 0 {
		alone := getWaiters.Add(1) == 1
		defer getWaiters.Add(-1)
		if alone {
			if res, ok := spinRecv(ch, c.spin); ok {
				return res, carried, res.err
			}
		}
	}
	select {
	case res := <-ch:
		return res, carried, res.err
	case <-ctx.Done():
	case <-down:
	case <-c.ctx.Done():
		r.forget(id)
		return result{}, nil, net.ErrClosed
	}
	err := context.Cause(ctx)
	if ctx.Err() == nil {
		err = fmt.Errorf("the connection to the producer failed: %w", xfer.ErrPeerLost)
	}
	select {
	case res := <-ch:
		// It ended as it was abandoned.
		if res.err == nil {
			return res, carried, nil
		}
		return res, carried, res.err
	default:
	}
	// Abandoned by its ctx, not by a lost connection: the producer hears
	// so. Decided now: ctx may end later for reasons of the caller's own
	// (a Get's watch of its producer ends when the Get returns), and a
	// connection that was lost has nothing to cancel.
	abandoned := ctx.Err() != nil
	c.wg.Go(func() {
		if abandoned {
			c.send(c.ctx, r.peer, appendCancel(nil, id))
		}
		select {
		case res := <-ch:
			late(res)
		case <-down:
			r.forget(id)
			late(result{err: xfer.ErrPeerLost})
		case <-c.ctx.Done():
		}
	})
	return result{}, nil, err
}

// answerErr turns a producer's non-ok answer into an error.
func answerErr(rep reply) error {
	switch rep.status {
	case statusNotFound:
		return fmt.Errorf("%w (%s)", ErrNotFound, rep.msg)
	case statusRefused:
		return fmt.Errorf("the producer refused the request: %s: %w", rep.msg, ErrProtocol)
	case statusClosed:
		return fmt.Errorf("the producer is closing: %w", xfer.ErrPeerLost)
	default:
		return fmt.Errorf("the producer failed: %s", rep.msg)
	}
}

// onReply delivers an answer of a producer to the get waiting for it.
func (c *Connector) onReply(p *xfer.Peer, msg []byte) {
	rep, err := parseReply(msg)
	c.mu.Lock()
	r := c.remote[p]
	c.mu.Unlock()
	if r == nil {
		c.log.Warn("connector: an answer from a peer this connector did not ask", "peer", p.String())
		return
	}
	if err != nil {
		c.log.Warn("connector: a malformed answer", "peer", p.String(), "err", err)
		if len(msg) >= 5 {
			id := binary.LittleEndian.Uint32(msg[1:5])
			r.deliver(id, result{err: fmt.Errorf("%w: %w", err, ErrProtocol)})
		}
		return
	}
	if !r.deliver(rep.id, result{rep: rep}) {
		c.log.Warn("connector: an answer to an unknown get", "peer", p.String(), "id", rep.id)
	}
}

// release ends the claim id at the producer r: taken says whether this
// consumer has the value. The release waits for the next get to r to
// carry it, for releaseDelay at most.
func (c *Connector) release(r *remote, id uint32, taken bool) {
	if !r.noCarry.Load() {
		r.relMu.Lock()
		if len(r.rels) < maxCarried*carriedLen {
			r.rels = appendCarriedRelease(r.rels, id, taken)
			if !r.relArmed {
				r.relArmed = true
				if r.relTimer == nil {
					r.relTimer = time.AfterFunc(releaseDelay, func() { c.releaseLate(r) })
				} else {
					r.relTimer.Reset(releaseDelay)
				}
			}
			r.relMu.Unlock()
			return
		}
		r.relMu.Unlock()
	}
	c.sendRelease(r, id, taken)
}

// sendRelease sends one release on its own.
func (c *Connector) sendRelease(r *remote, id uint32, taken bool) {
	if err := c.send(c.ctx, r.peer, appendRelease(nil, id, taken)); err != nil {
		c.log.Debug("connector: releasing a claim failed", "peer", r.peer.String(), "err", err)
	}
}

// sendReleases sends rels (releases a get did not carry after all) and
// the releases held back for r, each on its own.
func (c *Connector) sendReleases(r *remote, rels []byte) {
	r.relMu.Lock()
	held := r.rels
	if len(held) > 0 {
		r.rels = nil
	}
	r.relMu.Unlock()
	for _, b := range [][]byte{rels, held} {
		for ; len(b) >= carriedLen; b = b[carriedLen:] {
			c.sendRelease(r, binary.LittleEndian.Uint32(b), b[4] == 1)
		}
	}
}

// releaseLate sends the releases no get carried within releaseDelay. Once
// the connector stops, its syncs send them (Stop).
func (c *Connector) releaseLate(r *remote) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	r.relMu.Lock()
	r.relArmed = false
	r.relMu.Unlock()
	c.sendReleases(r, nil)
}

// carry makes the get m carry the releases held back for r, when they fit
// and the producer takes them. It returns the message and what it carries.
func (c *Connector) carry(r *remote, m []byte) ([]byte, []byte) {
	if r.noCarry.Load() {
		return m, nil
	}
	r.relMu.Lock()
	defer r.relMu.Unlock()
	n := len(r.rels)
	if n == 0 || len(m)+1+n > maxControl {
		return m, nil
	}
	m = appendCarried(m, r.rels)
	r.rels = r.rels[:0]
	return m, m[len(m)-n:]
}

// spinRecv polls ch for up to d (Config.WaitSpin) and reports whether it
// got a result: the caller keeps its thread awake meanwhile, and then waits
// as usual. The clock is read every spinCheck polls.
func spinRecv(ch <-chan result, d time.Duration) (result, bool) {
	start := time.Now()
	for i := 1; ; i++ {
		select {
		case res := <-ch:
			return res, true
		default:
		}
		if i%spinCheck == 0 && time.Since(start) >= d {
			return result{}, false
		}
	}
}

const spinCheck = 32

// getWaiters counts the Gets of the process waiting now on connectors
// that spin (waitSpin).
var getWaiters atomic.Int32
