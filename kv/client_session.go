package kv

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// session returns the current session, establishing one when there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		return c.sess, nil
	}
	// Not WaitForReady: while the server is unreachable Hello fails at
	// once with Unavailable, and the callers (connect, retry) wait and try
	// again, knowing why.
	h, err := c.rpc.Hello(ctx, &kvpb.HelloRequest{Protocol: Protocol})
	if err != nil {
		return nil, c.convert(err)
	}
	c.helloAnswered.Store(true)
	if len(h.DataAddrs) == 0 {
		return nil, fmt.Errorf("kv: %s: the server has no data-plane address", c.target)
	}
	// Spread clients over the server's data-plane engines.
	f := fnv.New32a()
	id := c.e.ID()
	f.Write(id[:])
	addr := c.dataAddr(h.DataAddrs[int(f.Sum32())%len(h.DataAddrs)])
	p, err := c.e.Dial(ctx, addr)
	if err != nil {
		if errors.Is(err, xfer.ErrAuth) || errors.Is(err, xfer.ErrNoTransport) || errors.Is(err, xfer.ErrVersion) || ctx.Err() != nil {
			return nil, fmt.Errorf("kv: data plane %s: %w", addr, err)
		}
		// Most likely the server is restarting: worth another Hello.
		return nil, fmt.Errorf("kv: data plane %s: %w: %w", addr, ErrUnavailable, err)
	}
	c.reached()
	c.sess = &session{id: string(h.ServerId), addr: addr, peer: p, inlineMax: h.InlineMax, maxValue: h.MaxValue, maxKey: h.MaxKey}
	if m, ok := h.InlineMaxByTransport[p.Transport()]; ok {
		c.sess.inlineMax = min(c.sess.inlineMax, m)
	}
	if c.opts.InlineMax < 0 {
		c.sess.inlineMax = 0
	} else if c.opts.InlineMax > 0 {
		c.sess.inlineMax = min(c.sess.inlineMax, uint64(c.opts.InlineMax))
	}
	if c.msgs != nil {
		// Requests carry at most a key and an inline value.
		c.sess.inlineMax = min(c.sess.inlineMax, uint64(max(c.msgs.size-1024-int(h.MaxKey), 0)))
		c.sess.pending = make(map[uint64]*pendingCall)
		sess := c.sess
		p.Handle(func(msg []byte) { c.onResponse(sess, msg) })
		p.HandleNotify(func(n xfer.Notification) { c.onNotify(sess, n) })
	}
	return c.sess, nil
}

// liveSession returns the current session, establishing one as retry
// does: trying again while the server is unreachable (for reconnect_wait,
// or up to the call bound with CallTimeout).
func (c *Client) liveSession(ctx context.Context) (*session, error) {
	if s, err := c.session(ctx); err == nil {
		return s, nil
	}
	var sess *session
	err := c.retry(ctx, func(s *session) error { sess = s; return nil })
	return sess, err
}

// dataAddr fills in the host of a data address that has none.
func (c *Client) dataAddr(a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(c.host, port)
	}
	return a
}

// reset drops sess, after the server said it does not know this client's
// data-plane connection or it broke; the next call says Hello again.
func (c *Client) reset(sess *session) {
	c.mu.Lock()
	if c.sess == sess {
		c.sess = nil
		sess.peer.Close()
	}
	c.mu.Unlock()
}

// retry runs f with a session until it succeeds, fails for a reason other
// than the server's unavailability, ctx is done, or the server has refused
// connections for reconnect_wait (a *DownError: see bound.go).
func (c *Client) retry(ctx context.Context, f func(*session) error) error {
	backoff := 10 * time.Millisecond
	var failedAt time.Time // when the first try failed
	for {
		sess, err := c.session(ctx)
		if err == nil {
			err = f(sess)
			if err == nil {
				return nil
			}
			err = c.convert(err)
			if !errors.Is(err, ErrUnavailable) {
				return err
			}
			c.reset(sess)
			var re *xfer.ReconnectError
			if errors.As(err, &re) && !c.noWait {
				// The data plane's engine redialed the old data address
				// for reconnect_wait: ask the server (Hello) now, at once,
				// for its data address; a refusal there fails the call.
				c.downFor(re.Tried)
				continue
			}
		}
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, xfer.ErrClosed) && !errors.Is(err, xfer.ErrPeerLost) {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("kv: %w", cerr)
			}
			return err
		}
		if c.noWait {
			if errors.Is(err, ErrUnavailable) {
				return err
			}
			return &unavailableError{target: c.target, msg: err.Error()}
		}
		if failedAt.IsZero() {
			failedAt = time.Now()
		}
		pause := backoff
		if c.refusedErr(err) {
			// Short pauses while refused, as the engine's: the last try
			// comes near the end of reconnect_wait.
			pause = min(pause, refusedPauseMax)
			left, derr := c.refused(err, pause, failedAt)
			if derr != nil {
				return derr
			}
			if left >= 0 {
				pause = min(pause, left) // the last try at reconnect_wait
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kv: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(pause):
		}
		if !c.rideThrough {
			// The next try dials now: gRPC's own backoff, up to 2 s,
			// must not put it past reconnect_wait.
			c.conn.ResetConnectBackoff()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// convert maps a gRPC status to the package's errors.
func (c *Client) convert(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return &serverError{msg, ErrNotFound}
	case codes.ResourceExhausted:
		return &serverError{msg, ErrFull}
	case codes.InvalidArgument:
		if d := errorDetail(st); d.GetReason() == kvpb.ErrorDetail_REASON_INVALID_KEY {
			return &serverError{msg, ErrInvalidKey}
		}
		return &serverError{msg, ErrInvalid}
	case codes.Unavailable:
		if reason, ok := authRefused(msg); ok {
			return fmt.Errorf("kv: %s: %w: %s", c.target, xfer.ErrAuth, reason)
		}
		return &unavailableError{target: c.target, msg: msg}
	case codes.Aborted:
		return &serverError{msg, ErrMoved}
	case codes.FailedPrecondition:
		if d := errorDetail(st); d.GetReason() == kvpb.ErrorDetail_REASON_HAS_LEASE {
			return &LeaseError{msg: msg, Left: time.Duration(d.LeaseLeftMs) * time.Millisecond}
		}
		for _, d := range st.Details() {
			if b, ok := d.(*kvpb.BufferTooSmall); ok {
				return &BufferTooSmallError{Needed: b.Needed, Have: b.Have}
			}
		}
	case codes.Unauthenticated:
		return fmt.Errorf("kv: %w: %s", xfer.ErrAuth, strings.TrimPrefix(msg, "kv: "))
	case codes.Canceled:
		return fmt.Errorf("kv: %w", context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("kv: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("kv: %s: %s", st.Code(), msg)
}

// errorDetail is st's ErrorDetail, or nil.
func errorDetail(st *status.Status) *kvpb.ErrorDetail {
	for _, d := range st.Details() {
		if e, ok := d.(*kvpb.ErrorDetail); ok {
			return e
		}
	}
	return nil
}
