package connector

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Every call ends, and a producer that is gone or silent fails it on
// time. A producer whose address refuses or resets connections fails a
// Get after the engine's reconnect_wait (2 s: an error matching
// xfer.ErrPeerLost, a *xfer.ReconnectError). A call whose ctx has no
// deadline ends by the connector's call bound: by default within the
// engine's op_timeout, of which a Get waits seven eighths for its value
// and then gives the last eighth to a probe of its producer, so that the
// error tells a producer that stopped (a *StalledError) from one that is
// alive but has not put the key (ErrNotFound). Config.CallTimeout, when
// set, is a longer bound that rides through a producer's restart instead:
// the Get waits up to it, and its probe up to op_timeout.

// StalledError is the error of a Get whose ctx had no deadline, that got
// no value within the call bound, and whose producer did not answer a
// probe either. It matches xfer.ErrStalled and os.ErrDeadlineExceeded,
// and, through Unwrap, how the probe failed (xfer.ErrPeerLost when the
// connection to the producer failed). It does not match ErrNotFound.
type StalledError struct {
	Op       string        // "get"
	Key      string        // the key, as the caller gave it
	Producer string        // the producer's address
	Bound    time.Duration // the call bound
	// RideThrough: the bound is Config.CallTimeout (call_timeout), not
	// the engine's op_timeout.
	RideThrough bool
	Err         error // how the probe failed
}

func (e *StalledError) Error() string {
	by := "op_timeout"
	if e.RideThrough {
		by = "call_timeout"
	}
	return fmt.Sprintf("connector: %s %q from %s: the producer stalled or is gone: no value within %v (%s), and %v",
		e.Op, e.Key, e.Producer, e.Bound, by, e.Err)
}

// Is matches xfer.ErrStalled and os.ErrDeadlineExceeded.
func (e *StalledError) Is(target error) bool {
	return target == xfer.ErrStalled || target == os.ErrDeadlineExceeded
}

// Unwrap returns how the probe failed.
func (e *StalledError) Unwrap() error { return e.Err }

// callTimeout is the call bound that Config.CallTimeout d gives with
// engine e (0 for none), and how long a Get that reaches it waits for its
// producer's answer to a probe: by default (d is 0) the two share the
// engine's op_timeout, seven eighths and one; with d set, the bound is d
// and the probe waits op_timeout.
func callTimeout(d time.Duration, e *xfer.Engine) (bound, probe time.Duration) {
	op := e.Config().OpTimeout
	if op <= 0 {
		op = xfer.DefaultOpTimeout // for the probe alone
	}
	if d != 0 {
		return callbound.Resolve(d, 0), op
	}
	bound = callbound.Resolve(0, e.Config().OpTimeout)
	return bound - bound/8, max(bound/8, time.Millisecond)
}

// bounded returns ctx limited by the call bound when it has no deadline
// (callbound.Bounder.Bound: calls over one parent context share its
// bound, without allocating).
func (c *Connector) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.calls.Bound(ctx)
}

// byBound reports whether the call bound ended ctx (from bounded).
func byBound(ctx context.Context) bool { return callbound.Ended(ctx) }
