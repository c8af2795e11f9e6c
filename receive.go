package xfer

import (
	"context"
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/metrics"
)

// The receive side of a peer: its queue of SENDs (internal/inbox), and
// the handlers that take messages and notifications instead.

// Recv waits for the next message from this peer and copies it into buf.
// It waits as long as ctx lets it for a peer that is alive, if idle; it
// fails, naming the peer, when the connection fails (ErrPeerLost), or when
// the peer stalls: quiet for half of Config.OpTimeout, it is probed, and
// one that does not answer within OpTimeout fails Recv with a *StallError.
// When buf is too small, it returns an error matching ErrTooLarge that states
// the size needed, and keeps the message for the next Recv.
func (p *Peer) Recv(ctx context.Context, buf []byte) (n int, err error) {
	if p.e.metrics != nil {
		start := recvStart()
		defer func() { p.recvDone(n, start, err) }()
	}
	for {
		n, ok, err := p.inbox.Take(buf)
		if ok || err != nil {
			return n, err
		}
		if err := p.waitFor(ctx, "recv", p.inbox.Signal()); err != nil {
			return 0, err
		}
	}
}

// waitFor waits, as a waiter the watchdog probes the peer for, until
// signal has a token; or fails when ctx ends, the peer is closed, or the
// connection it waits on fails (the peer died, or stalled: a
// *StallError), naming the operation op and the peer. A connection that a
// move retired on purpose is no failure: it waits on the new one.
func (p *Peer) waitFor(ctx context.Context, op string, signal <-chan struct{}) error {
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	for {
		var epDone <-chan struct{}
		ep := p.current()
		if ep != nil {
			epDone = ep.Done()
		}
		select {
		case <-signal:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%s from %s: %w", op, p, ErrClosed)
		case <-epDone:
			if _, moved := p.retired.Load(ep); moved && p.current() != ep {
				continue // a move replaced it: wait on the new one
			}
			return p.waitEnded(op, ep)
		}
	}
}

// Handle makes f receive the peer's messages, in order, instead of Recv:
// first those already waiting for Recv, then each as it arrives. f runs on
// the transport's receive path, one message at a time, so it must not block
// (hand slow work to a goroutine) and must not keep msg after it returns.
// It saves a goroutine hand-off per message; services with their own
// request loop (the kv package) use it. Call Handle once, before any Recv.
func (p *Peer) Handle(f func(msg []byte)) { p.inbox.Handle(f) }

// HandleNotify makes f receive the notifications of this peer's
// write-with-notify operations (WriteNotify on the other side) instead of
// Engine.WaitNotify, each once its data is in place. f runs on the
// transport's receive path, so it must not block; it saves the hand-off
// to the goroutine that waits in WaitNotify, and lets a request/response
// protocol answer a request with the write of its data alone (the kv
// package's GETs). Notifications that arrived before HandleNotify wait in
// the engine's queue. Call it once, before the peer is asked to notify.
func (p *Peer) HandleNotify(f func(Notification)) {
	p.notify.Store(&f)
}

// WaitNotify returns the next notification of this peer's write-with-notify
// operations (WriteNotify on the other side), the per-peer counterpart of
// Engine.WaitNotify (do not use both for one peer: whichever asks first
// takes a notification). It waits as Recv does: as long as ctx lets it
// for a peer that is alive, if idle; it fails, naming the peer, when the
// connection fails (ErrPeerLost) or the peer stalls (a *StallError).
func (p *Peer) WaitNotify(ctx context.Context) (Notification, error) {
	for {
		v, ok, changed := p.e.notes.TakeFrom(p)
		if ok {
			return v, nil
		}
		if err := p.waitFor(ctx, "wait notify", changed); err != nil {
			return Notification{}, err
		}
	}
}

// Queued is the number of messages waiting for Recv.
func (p *Peer) Queued() int { return p.inbox.Len() }

// recvStart returns the time to measure a Recv from: one in
// metrics.LatencyEvery at random (a Recv is counted when it returns a
// message).
func recvStart() time.Time { return metrics.SampleStart(metrics.LatencyEvery) }

// recvDone records the end of a Recv of n bytes started at start.
func (p *Peer) recvDone(n int, start time.Time, err error) {
	if err != nil {
		p.opFailed(metrics.Recv, err)
		return
	}
	c := p.stats.Conn()
	if c == nil {
		return
	}
	if !start.IsZero() {
		c.Observe(metrics.Recv, start)
	}
	c.Delivered(n)
}
