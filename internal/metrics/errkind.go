package metrics

import (
	"context"
	"errors"
	"net"
	"os"

	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/watchdog"
	"github.com/xferio/xfer/transport"
)

// ErrorKind classifies err for the kind label of xfer_op_errors_total: a
// bounded set, matched with errors.Is against the engine's sentinels
// (which are these packages' values).
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, watchdog.ErrStalled):
		return "stalled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, transport.ErrRemoteAccess):
		return "remote_access"
	case errors.Is(err, transport.ErrTooLarge):
		return "too_large"
	case errors.Is(err, transport.ErrNotRegistered):
		return "not_registered"
	case errors.Is(err, transport.ErrPathFailed):
		return "path_failed"
	case errors.Is(err, transport.ErrPeerLost):
		return "peer_lost"
	case errors.Is(err, handshake.ErrNoTransport), errors.Is(err, transport.ErrNotSupported):
		return "no_transport"
	case errors.Is(err, handshake.ErrAuth):
		return "auth"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	return "other"
}
