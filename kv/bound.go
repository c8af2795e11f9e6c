package kv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Every call of a Client ends: by its context's deadline, or, when the
// context has none, by the client's call bound (ClientOptions.CallTimeout),
// so that a server that stopped (SIGSTOP, a hung host) or died cannot hold
// a caller forever.

// CallTimeoutFactor is how many of the client engine's op_timeout make the
// default call bound (ClientOptions.CallTimeout): 30 s with the default
// op_timeout of 10 s.
const CallTimeoutFactor = callbound.Factor

// StalledError is the error of a call whose context had no deadline and
// which got no answer from the server within the client's call bound
// (ClientOptions.CallTimeout). A server that is gone (nothing listens at
// its address: it died) matches ErrUnavailable; one that holds the
// connection open but does not answer (stopped, hung) matches
// xfer.ErrStalled. Both match os.ErrDeadlineExceeded, and Err, the
// call's own error, through Unwrap.
type StalledError struct {
	Op     string        // the call: "get", "put", "delete", "stats"
	Server string        // the server's address
	Bound  time.Duration // the call bound
	Err    error         // how the call itself ended
}

func (e *StalledError) Error() string {
	what := "stalled (no answer)"
	if errors.Is(e.Err, ErrUnavailable) {
		what = "is gone (unreachable)"
	}
	return fmt.Sprintf("kv %s: server %s %s for %v, the call bound (call_timeout, by default %d × op_timeout): %v",
		e.Op, e.Server, what, e.Bound, CallTimeoutFactor, e.Err)
}

// Is matches xfer.ErrStalled, unless the server is gone, and
// os.ErrDeadlineExceeded.
func (e *StalledError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded || target == xfer.ErrStalled && !errors.Is(e.Err, ErrUnavailable)
}

// Unwrap returns the call's own error.
func (e *StalledError) Unwrap() error { return e.Err }

// callTimeout returns the call bound of a client whose options are opts
// and whose engine is e: 0 for none.
func callTimeout(opts ClientOptions, e *xfer.Engine) time.Duration {
	return callbound.Resolve(opts.CallTimeout, e.Config().OpTimeout)
}

// bound returns ctx limited by the client's call bound when it has no
// deadline of its own (callbound.Bounder.Bound).
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.calls.Bound(ctx)
}

// bounded turns err, how call op ended under ctx (from bound), into a
// *StalledError when the call bound ended it.
func (c *Client) bounded(ctx context.Context, op string, err error) error {
	if err == nil || !callbound.Ended(ctx) {
		return err
	}
	if p := c.dialErr.Load(); p != nil && !errors.Is(err, ErrUnavailable) {
		// gRPC waited for a server it could not connect to.
		err = fmt.Errorf("%w (%w)", err, &unavailableError{target: c.target, msg: (*p).Error()})
	}
	return &StalledError{Op: op, Server: c.target, Bound: c.callTimeout, Err: err}
}
