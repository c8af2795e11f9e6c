package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Join opens one more connection to the established connection whose
// welcome carried token, at addr, dialing with d. A join the acceptor drops
// before its result, as a listener flooded with strays drops the oldest,
// is dialed again within ctx (the transport's handshake_timeout).
func Join(ctx context.Context, d *net.Dialer, addr string, token [16]byte) (net.Conn, error) {
	for redials := 1; ; redials++ {
		nc, err := joinOnce(ctx, d, addr, token)
		if !errors.Is(err, ErrDropped) {
			return nc, err
		}
		select {
		case <-time.After(Backoff(redials)):
		case <-ctx.Done():
			return nil, CtxErr(ctx, err)
		}
	}
}

// Backoff is the pause before the n-th dial again of a dropped handshake.
func Backoff(n int) time.Duration {
	return min(time.Duration(n)*10*time.Millisecond, 200*time.Millisecond)
}

// joinOnce dials one extra connection for the connection token names.
func joinOnce(ctx context.Context, d *net.Dialer, addr string, token [16]byte) (net.Conn, error) {
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := nc.Write(wire.AppendJoin(nil, &wire.Join{Token: token})); err != nil {
		nc.Close()
		return nil, dropped(ctx, err)
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		nc.Close()
		return nil, dropped(ctx, CtxErr(ctx, err))
	}
	if typ != wire.MsgResult {
		nc.Close()
		return nil, fmt.Errorf("%w: join answered with message type %d", transport.ErrProtocol, typ)
	}
	if err := resultErr(addr, body); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}
