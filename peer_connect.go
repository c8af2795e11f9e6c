package xfer

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/xferio/xfer/transport"
)

// A dialed peer's connection: made on first use, made again after it
// fails, and watched while it is up.

// markRevokes notes the engine's revoke count before a connection starts:
// setEndpoint replays later revokes to the new endpoint.
func (p *Peer) markRevokes() {
	p.e.mu.Lock()
	p.mark.Store(p.e.revSeq)
	p.e.mu.Unlock()
}

func (p *Peer) setEndpoint(ep transport.Endpoint) *epBox {
	b := &epBox{ep: ep}
	if m := p.e.metrics; m != nil {
		b.conn = m.NewConn(ep, p.stats.conn.Load())
		old := p.stats.conn.Swap(b.conn)
		if old != nil {
			ops, bytes := old.Totals()
			p.stats.prevOps.Add(ops)
			p.stats.prevBytes.Add(bytes)
		}
		p.takeEarly(b.conn)
	}
	p.stats.upSince.Store(time.Now().UnixNano())
	p.ep.Store(b)
	p.e.replayRevokes(p, ep)
	return b
}

// endpoint returns a live endpoint, with its counters, dialing again if
// this engine dialed the peer and the last connection failed.
func (p *Peer) endpoint(ctx context.Context) (*epBox, error) {
	for {
		var ep transport.Endpoint
		if b := p.ep.Load(); b != nil {
			ep = b.ep
			select {
			case <-ep.Done():
			default:
				return b, nil
			}
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("peer %s: %w", p, ErrClosed)
		}
		if p.dialAddr == "" {
			p.mu.Unlock()
			if ep == nil {
				return nil, fmt.Errorf("peer %s: not connected: %w", p, ErrClosed)
			}
			return nil, ep.Err()
		}
		if p.dialing != nil {
			ch := p.dialing
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		p.mu.Unlock()
		prev, why := "", error(nil)
		if ep != nil {
			prev, why = ep.Transport(), ep.Err()
			ep.Close()
			p.mu.Lock()
			first := p.downDials == 0
			p.mu.Unlock()
			if first {
				p.e.log.Info("reconnecting to peer", "peer", p.dialAddr, "after", why)
			}
		}
		p.markRevokes()
		nep, err := p.e.connect(ctx, p)
		// Publish the new endpoint before the dial slot is free: a caller
		// that found the old one failed and took the slot in between
		// would dial once more and replace this one, which then stayed
		// open with nothing to close it.
		var b *epBox
		if err == nil {
			b = p.setEndpoint(nep)
			p.watch(nep) // it closes nep if the peer closed meanwhile
		}
		p.mu.Lock()
		p.dialing = nil
		close(ch)
		closed := p.closed
		if err == nil {
			p.downSince, p.downDials = time.Time{}, 0
		}
		p.mu.Unlock()
		if err != nil {
			if ep != nil && !closed && refusedDial(err) {
				// A reconnection the peer's address refused: it died
				// or is restarting. Dial again for a while, no longer.
				if err = p.refused(ctx, err); err == nil {
					continue
				}
			}
			return nil, err
		}
		if closed {
			nep.Close()
			if m := p.e.metrics; m != nil {
				m.Retire(b.conn) // published after Close retired the peer's
			}
			return nil, fmt.Errorf("peer %s: %w", p, ErrClosed)
		}
		p.reconnected(prev, nep.Transport(), why)
		return b, nil
	}
}

// watch releases ep's resources (its queue pairs, rings, buffers and
// goroutines) as soon as it fails, rather than when the peer is next used or
// closed: a peer that went away may never be used again. A peer this engine
// accepted cannot reconnect, so it also leaves the engine's peers (unless
// its dialer resumed it on another connection meanwhile); its operations
// keep failing with the link's error. A dialed peer dials again on its next
// operation.
func (p *Peer) watch(ep transport.Endpoint) {
	go func() {
		select {
		case <-ep.Done():
			ep.Close()
			p.tokens.Delete(ep)
			if p.dialAddr == "" && p.current() == ep {
				p.e.removePeer(p)
			}
			p.lost(ep)
		case <-p.done:
			// The peer closed. Peer.Close closes its current endpoint;
			// this one may have been replaced meanwhile (a reconnect) and
			// not be current: close it too, or its resources (shm's
			// pidfd, rdma's QPs) outlive the engine. Close is idempotent.
			ep.Close()
			p.tokens.Delete(ep)
		}
	}()
}

// lost reports the failure of p's connection ep to Engine.WaitNotify,
// unless p was closed here, the engine is closing, p's notifications go to
// a handler (Peer.HandleNotify), or a move retired ep on purpose (a move
// back to a paused transport, or a resumed peer, replaced it: it is closed
// once drained). A connection that failed is reported even when a
// reconnection already replaced it.
func (p *Peer) lost(ep transport.Endpoint) {
	select {
	case <-p.done:
		return
	default:
	}
	if p.e.ctx.Err() != nil || p.notify.Load() != nil {
		return
	}
	if _, ok := p.retired.Load(ep); ok {
		return
	}
	err := ep.Err()
	if r := p.stall.Load(); r != nil && r.ep == ep {
		err = &StallError{Op: "wait notify", Peer: p.String(), Timeout: r.timeout, Pending: r.pending, Cause: err}
	}
	p.e.notes.Lost(p, err)
}

// reconnectPause is the first pause between the dials of a peer whose
// address refuses connections; it doubles up to reconnectPauseMax.
const (
	reconnectPause    = 50 * time.Millisecond
	reconnectPauseMax = 500 * time.Millisecond
)

// refusedDial reports whether err, a failed dial of a peer, says that
// nothing listens at its address any more or that what answered reset the
// connection: the peer died or is restarting, and waiting longer for it
// than a restart takes is pointless.
func refusedDial(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// refused records that a reconnection of p failed with err, a refusal
// (refusedDial), and decides what comes next: nil when the caller should
// dial again (after a pause, taken here), or the error to fail with: a
// *ReconnectError once the next dial would come after Config.ReconnectWait
// of refusals (so the operation ends within it, having dialed through
// all but its last pause, at most reconnectPauseMax), or
// ctx's error. The time counts from the first refusal since p's last
// connection, across callers: an operation that starts while the peer is
// known to be down dials once and fails at once.
func (p *Peer) refused(ctx context.Context, err error) error {
	wait := p.e.cfg.ReconnectWait
	now := time.Now()
	p.mu.Lock()
	if p.downSince.IsZero() {
		p.downSince = now
	}
	p.downDials++
	tried, dials := now.Sub(p.downSince), p.downDials
	p.mu.Unlock()
	// The last dial is the last one before the window ends: one more
	// after the pause would come past it, so the operation fails within
	// reconnect_wait of the first refusal rather than just after it.
	pause := min(reconnectPause<<min(dials-1, 8), reconnectPauseMax)
	if wait <= 0 || tried+pause > wait {
		return &ReconnectError{Peer: p.dialAddr, Tried: tried, Attempts: dials, Wait: max(wait, 0), Err: err}
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reconnect to %s: %w (last dial: %w)", p.dialAddr, ctx.Err(), err)
	case <-p.done:
		return fmt.Errorf("peer %s: %w", p, ErrClosed)
	}
}
