package handshake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// The handshake's errors, which the engine's sentinels are (xfer.ErrAuth,
// xfer.ErrVersion, xfer.ErrNoTransport); a broken protocol is
// transport.ErrProtocol.
var (
	// ErrAuth means the handshake's authentication failed.
	ErrAuth = errors.New("authentication failed")
	// ErrVersion means the two sides speak no common protocol version.
	ErrVersion = errors.New("no common protocol version")
	// ErrNoTransport means the two sides have no usable transport in
	// common under their policies.
	ErrNoTransport = errors.New("no usable transport")
)

// ErrDropped is a handshake (or a join) whose connection the acceptor
// closed before its welcome (its result): a listener busy with others
// (security.max_pending_*) evicts connections still in their handshake.
// The dialer dials again.
var ErrDropped = errors.New("the peer closed the connection before the handshake ended")

// AuthError is an inbound handshake refused for an authentication reason
// (auth.ReasonNoProof, ...), which the engine counts.
type AuthError struct {
	Reason string
	Err    error
}

func (e *AuthError) Error() string { return e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// dropped is err, a failure of a handshake's read or write, marked
// ErrDropped when the acceptor closed the connection.
func dropped(ctx context.Context, err error) error {
	if ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return fmt.Errorf("%w (%w)", ErrDropped, err)
	}
	return err
}

// CtxErr is err, which happened while ctx ended, as ctx's error (the
// cause named).
func CtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// resultErr is the error a result's body says, nil for StatusOK.
func resultErr(addr string, body []byte) error {
	r, err := wire.DecodeResult(body)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	var kind error
	switch r.Status {
	case wire.StatusOK:
		return nil
	case wire.StatusAuthFailed:
		kind = ErrAuth
	case wire.StatusVersion:
		kind = ErrVersion
	case wire.StatusNoTransport:
		kind = ErrNoTransport
	default:
		kind = transport.ErrProtocol
	}
	// The peer's message may start with the kind's own words ("no usable
	// transport: ..."): say them once.
	msg := strings.TrimPrefix(r.Message, kind.Error()+": ")
	return fmt.Errorf("dial %s: refused by peer: %w: %s", addr, kind, msg)
}

// Refuse sends a refusal (a result of status st) and returns its message
// as an error.
func Refuse(nc net.Conn, st wire.Status, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	nc.Write(wire.AppendResult(nil, &wire.Result{Status: st, Message: msg}))
	return errors.New(msg)
}
