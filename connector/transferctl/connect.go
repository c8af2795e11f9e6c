package transferctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Accept listens on addr, the producer's, and accepts the consumer's
// connection, waiting up to timeout. say is told, once, that it waits.
func Accept(ctx context.Context, addr string, timeout time.Duration, say func(string)) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("control channel: listen on %s: %w", addr, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
	say(fmt.Sprintf("waiting for the consumer on %s (up to %v)", addr, timeout))
	conn, err := ln.Accept()
	switch {
	case ctx.Err() != nil:
		if conn != nil {
			conn.Close()
		}
		return nil, context.Cause(ctx)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("control channel: no consumer connected to %s within --timeout %v", addr, timeout)
	case err != nil:
		return nil, fmt.Errorf("control channel: accept on %s: %w", addr, err)
	}
	return conn, nil
}

// Dial connects to the producer's control channel at addr, retrying until
// timeout: the producer may start later. say is told, once, that it waits.
func Dial(ctx context.Context, addr string, timeout time.Duration, say func(string)) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	said := false
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if !said {
			say(fmt.Sprintf("waiting for the producer on %s (up to %v)", addr, timeout))
			said = true
		}
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
