package kv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Every call of a Client ends, and a server that is gone or silent fails
// it on time:
//
//   - a server whose address refuses or resets connections (it died, or is
//     restarting) is tried again, with backoff, for the client engine's
//     reconnect_wait (2 s by default); then the call fails with a
//     *DownError, and while it stays down each later call tries once and
//     fails at once;
//   - a server that holds the connection open but does not answer
//     (stopped, hung) fails a call whose context has no deadline within
//     the engine's op_timeout (10 s by default), with a *StalledError;
//   - ClientOptions.CallTimeout, when set, is the longer bound that rides
//     through a server's restart instead: calls wait for the server, down
//     or silent, up to it.
//
// A context's deadline, when there is one, bounds a silent server's call
// instead of op_timeout; reconnect_wait applies whatever the context says.

// StalledError is the error of a call whose context had no deadline and
// which got no answer from the server within the client's call bound: the
// engine's op_timeout, or ClientOptions.CallTimeout when set. A server
// that is gone (nothing listens at its address: it died) matches
// ErrUnavailable; one that holds the connection open but does not answer
// (stopped, hung) matches xfer.ErrStalled. Both match
// os.ErrDeadlineExceeded, and Err, the call's own error, through Unwrap.
type StalledError struct {
	Op     string        // the call: "get", "put", "delete", "stats"
	Server string        // the server's address
	Bound  time.Duration // the call bound
	// RideThrough: the bound is ClientOptions.CallTimeout (call_timeout),
	// not the engine's op_timeout.
	RideThrough bool
	Err         error // how the call itself ended
}

func (e *StalledError) Error() string {
	what := "stalled (no answer)"
	if errors.Is(e.Err, ErrUnavailable) {
		what = "is gone (unreachable)"
	}
	by := "op_timeout"
	if e.RideThrough {
		by = "call_timeout"
	}
	return fmt.Sprintf("kv %s: server %s %s for %v (%s): %v", e.Op, e.Server, what, e.Bound, by, e.Err)
}

// Is matches xfer.ErrStalled, unless the server is gone, and
// os.ErrDeadlineExceeded.
func (e *StalledError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded || target == xfer.ErrStalled && !errors.Is(e.Err, ErrUnavailable)
}

// Unwrap returns the call's own error.
func (e *StalledError) Unwrap() error { return e.Err }

// DownError is the error of a call whose server refused or reset every
// connection for the client engine's reconnect_wait: it is down (its
// process died, or has not come back yet). It matches ErrUnavailable, and
// Err, the last attempt's error (syscall.ECONNREFUSED, ...), through
// Unwrap. ClientOptions.CallTimeout rides through a restart instead.
type DownError struct {
	Op       string        // the call: "get", "put", "delete", "stats"
	Server   string        // the server's address
	Tried    time.Duration // how long the server has refused
	Attempts int           // the attempts that failed since
	Wait     time.Duration // the engine's reconnect_wait
	Err      error         // the last attempt's error
}

func (e *DownError) Error() string {
	how := "reset"
	if errors.Is(e.Err, syscall.ECONNREFUSED) {
		how = "refused"
	}
	return fmt.Sprintf("kv %s: server %s is gone: it %s every connection for %v (%d attempts; reconnect_wait %v): %v",
		e.Op, e.Server, how, e.Tried.Round(time.Millisecond), e.Attempts, e.Wait, e.Err)
}

// Is matches ErrUnavailable.
func (e *DownError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the last attempt's error.
func (e *DownError) Unwrap() error { return e.Err }

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
// *StalledError when the call bound ended it, and names op in a
// *DownError.
func (c *Client) bounded(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var de *DownError
	if errors.As(err, &de) {
		de.Op = op
		return err
	}
	if !callbound.Ended(ctx) {
		return err
	}
	if p := c.dialErr.Load(); p != nil && !errors.Is(err, ErrUnavailable) {
		// gRPC waited for a server it could not connect to.
		err = fmt.Errorf("%w (%w)", err, &unavailableError{target: c.target, msg: (*p).Error()})
	}
	return &StalledError{Op: op, Server: c.target, Bound: c.callTimeout, RideThrough: c.rideThrough, Err: err}
}

// refusedErr reports whether err, or the last failed dial of the gRPC
// channel, says that the server's address refuses or resets connections.
func (c *Client) refusedErr(err error) bool {
	if refusal(err) {
		return true
	}
	p := c.dialErr.Load()
	return p != nil && refusal(*p)
}

func refusal(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// refusedPauseMax bounds the pause between tries while the server
// refuses, so that the last try before reconnect_wait ends comes near its
// end.
const refusedPauseMax = 250 * time.Millisecond

// refused records a failed attempt to reach the server, whose address
// refuses or resets connections (refusedErr), and returns how long the
// client may go on trying, or a *DownError (its Op set by bounded) once a
// try after the next pause would come after the engine's reconnect_wait of
// refusals: the call fails within reconnect_wait. The time counts from
// the first failure since the client last reached the server (failedAt:
// when the calling retry first failed, or earlier calls' first), across
// calls. A client that rides through restarts (CallTimeout) tries until
// its bound instead (a left of -1).
func (c *Client) refused(err error, pause time.Duration, failedAt time.Time) (left time.Duration, _ error) {
	if c.rideThrough {
		return -1, nil
	}
	wait := max(c.e.Config().ReconnectWait, 0)
	now := time.Now()
	c.downMu.Lock()
	if c.downSince.IsZero() || failedAt.Before(c.downSince) {
		c.downSince = failedAt
	}
	c.downTries++
	tried, tries := now.Sub(c.downSince), c.downTries
	c.downMu.Unlock()
	if tried+pause <= wait {
		return wait - tried, nil
	}
	if p := c.dialErr.Load(); p != nil && !refusal(err) {
		err = *p // the dial's own error, not gRPC's words for it
	}
	return 0, &DownError{Server: c.target, Tried: tried, Attempts: tries, Wait: wait, Err: err}
}

// downFor notes that the server's data plane has refused connections for
// d already: a refusal that follows counts from then.
func (c *Client) downFor(d time.Duration) {
	c.downMu.Lock()
	if since := time.Now().Add(-d); c.downSince.IsZero() || since.Before(c.downSince) {
		c.downSince = since
	}
	c.downMu.Unlock()
}

// reached notes that the client reached the server: it is not down.
func (c *Client) reached() {
	c.downMu.Lock()
	c.downSince, c.downTries = time.Time{}, 0
	c.downMu.Unlock()
}
