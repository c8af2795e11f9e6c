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

// Dial returns a peer connected to the engine listening at addr, after a
// versioned handshake that authenticates both sides when a secret is
// configured and negotiates the transport. Peers are cached per address
// (and policy): a second Dial returns the same peer while it is up. A
// peer whose connection failed is dialed again by its next operation.
// Options change how this peer is dialed (WithTransport).
func (e *Engine) Dial(ctx context.Context, addr string, opts ...DialOption) (*Peer, error) {
	o := dialOptions{policy: e.cfg.Transport}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
	}
	key := addr
	if o.policy != e.cfg.Transport {
		key = addr + " (transport " + string(o.policy) + ")"
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", addr, ErrClosed)
	}
	if p := e.dialed[key]; p != nil {
		e.mu.Unlock()
		if _, err := p.endpoint(ctx); err != nil {
			return nil, err
		}
		return p, nil
	}
	e.mu.Unlock()
	p := e.newPeer(addr, transport.PeerInfo{})
	p.policy, p.dialKey = o.policy, key
	if _, err := p.endpoint(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if old := e.dialed[key]; old != nil {
		e.mu.Unlock()
		p.Close()
		return old, nil
	}
	e.dialed[key] = p
	e.mu.Unlock()
	if err := e.addPeer(p); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// DialOption changes how Dial dials one peer.
type DialOption func(*dialOptions) error

type dialOptions struct {
	policy Policy
}

// WithTransport dials the peer under policy instead of the engine's
// (Config.Transport): "tcp" keeps a peer on tcp while the others use
// rdma, say. The peer on the other side still applies its own policy.
func WithTransport(policy Policy) DialOption {
	return func(o *dialOptions) error {
		p, err := ParsePolicy(string(policy))
		if err != nil {
			return err
		}
		o.policy = p
		return nil
	}
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
