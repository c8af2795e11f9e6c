package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/xferio/xfer/internal/watchdog"
	"github.com/xferio/xfer/transport"
)

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{context.Canceled, "canceled"},
		// A stall is also a lost peer and a deadline: stalled wins.
		{fmt.Errorf("write: %w: %w", watchdog.ErrStalled, transport.ErrPeerLost), "stalled"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("x: %w", transport.ErrRemoteAccess), "remote_access"},
		{transport.ErrPeerLost, "peer_lost"},
		{transport.ErrNotSupported, "no_transport"},
		{net.ErrClosed, "closed"},
		{errors.New("something"), "other"},
	} {
		if got := ErrorKind(c.err); got != c.want {
			t.Errorf("ErrorKind(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
