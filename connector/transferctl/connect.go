package transferctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Dial connects to the producer's control channel at addr, retrying until
// timeout: the producer may start later. say is told, once, that it waits.
func Dial(ctx context.Context, addr string, timeout time.Duration, say func(string)) (net.Conn, error) {
	return dial(ctx, addr, timeout, time.Now().Add(timeout), onlyOnce(say))
}

// redialPause is how long Connect waits before it dials again a producer
// that dropped its connection.
const redialPause = 100 * time.Millisecond

// Connect dials the producer at addr (as Dial does), authenticates with
// secret, when there is one, and returns the Conn, whose every later
// message is authenticated, with the producer's hello. A producer that
// drops the connection before this side has authenticated (without a
// secret: before its hello), as one busy with other connections may, is
// dialed again until timeout; a producer that refuses this side (another
// secret) is an error at once.
func Connect(ctx context.Context, addr string, timeout time.Duration, secret string, say func(string)) (*Conn, Msg, error) {
	deadline := time.Now().Add(timeout)
	tell, say := say, onlyOnce(say)
	redialed := false
	for {
		conn, err := dial(ctx, addr, timeout, deadline, say)
		if err != nil {
			return nil, Msg{}, err
		}
		c := NewConn(ctx, conn, min(timeout, time.Until(deadline)), "producer")
		hello, err := c.handshake(secret)
		if err == nil {
			c.timeout = timeout
			return c, hello, nil
		}
		c.Close()
		var de *droppedError
		if !errors.As(err, &de) {
			return nil, Msg{}, err
		}
		if !redialed && tell != nil {
			tell(fmt.Sprintf("the producer on %s dropped the connection before the handshake ended; dialing again (up to --timeout %v)", addr, timeout))
			redialed = true
		}
		select {
		case <-ctx.Done():
			return nil, Msg{}, context.Cause(ctx)
		case <-time.After(redialPause):
		}
		if time.Now().After(deadline) {
			return nil, Msg{}, fmt.Errorf("control channel: the producer on %s dropped every connection before the handshake ended, for --timeout %v (last: %w)", addr, timeout, de.err)
		}
	}
}

// droppedError is a connection the producer closed before the consumer
// authenticated (without a secret, before hello): Connect dials again.
type droppedError struct{ err error }

func (e *droppedError) Error() string { return e.err.Error() }
func (e *droppedError) Unwrap() error { return e.err }

// handshake is the consumer's side: the authentication, then the
// producer's hello. A close before the authentication ended is a
// *droppedError.
func (c *Conn) handshake(secret string) (Msg, error) {
	dropped := func(err error) error {
		var ce *closedError
		if errors.As(err, &ce) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return &droppedError{err}
		}
		return err
	}
	if err := c.authenticate(secret, false); err != nil {
		return Msg{}, dropped(err)
	}
	hello, err := c.Recv(TypeHello)
	if err != nil && secret == "" {
		return Msg{}, dropped(err)
	}
	return hello, err
}

// onlyOnce returns a say that passes on its first message only.
func onlyOnce(say func(string)) func(string) {
	said := false
	return func(s string) {
		if !said && say != nil {
			said = true
			say(s)
		}
	}
}

// dial connects to addr, retrying until deadline; timeout is the whole
// bound, for the error.
func dial(ctx context.Context, addr string, timeout time.Duration, deadline time.Time, say func(string)) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		say(fmt.Sprintf("waiting for the producer on %s (up to %v)", addr, timeout))
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("control channel: no producer answered on %s within --timeout %v (last: %w)", addr, timeout, err)
			}
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
