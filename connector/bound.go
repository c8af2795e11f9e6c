package connector

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Every call ends: by its ctx's deadline, or, when ctx has none, by the
// connector's call bound (Config.CallTimeout). A Get that reaches the
// bound probes its producer, so that the error tells a producer that
// stopped or died from one that is alive but has not put the key.

// CallTimeoutFactor is how many of the engine's op_timeout make the
// default call bound (Config.CallTimeout).
const CallTimeoutFactor = callbound.Factor

// StalledError is the error of a Get whose ctx had no deadline, that got
// no value within the call bound (Config.CallTimeout), and whose producer
// did not answer a probe either within the engine's op_timeout. It
// matches xfer.ErrStalled and os.ErrDeadlineExceeded, and, through
// Unwrap, how the probe failed (xfer.ErrPeerLost when the connection to
// the producer failed). It does not match ErrNotFound.
type StalledError struct {
	Op       string        // "get"
	Key      string        // the key, as the caller gave it
	Producer string        // the producer's address
	Bound    time.Duration // the call bound
	Err      error         // how the probe failed
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("connector: %s %q from %s: the producer stalled or is gone: no value within %v, the call bound (call_timeout, by default %d × op_timeout), and %v",
		e.Op, e.Key, e.Producer, e.Bound, CallTimeoutFactor, e.Err)
}

// Is matches xfer.ErrStalled and os.ErrDeadlineExceeded.
func (e *StalledError) Is(target error) bool {
	return target == xfer.ErrStalled || target == os.ErrDeadlineExceeded
}

// Unwrap returns how the probe failed.
func (e *StalledError) Unwrap() error { return e.Err }

// callTimeout is the call bound that Config.CallTimeout d gives with
// engine e: 0 for none.
func callTimeout(d time.Duration, e *xfer.Engine) time.Duration {
	return callbound.Resolve(d, e.Config().OpTimeout)
}

// bounded returns ctx limited by the call bound when it has no deadline
// (callbound.Bounder.Bound: calls over one parent context share its
// bound, without allocating).
func (c *Connector) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.calls.Bound(ctx)
}

// byBound reports whether the call bound ended ctx (from bounded).
func byBound(ctx context.Context) bool { return callbound.Ended(ctx) }

// probe asks the producer at addr for a key it cannot hold, without
// waiting, and reports nil when it answers within the engine's
// op_timeout (it is alive), or why it did not.
func (c *Connector) probe(addr string) error {
	wait := c.eng.Config().OpTimeout
	if wait <= 0 {
		wait = xfer.DefaultOpTimeout
	}
	ctx, cancel := context.WithTimeout(c.ctx, wait)
	defer cancel()
	r, err := c.dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("a probe could not reach it: %w", err)
	}
	res, err := c.call(ctx, r, nil, func(id uint32) []byte { return appendGet(nil, id, flagNoWait, probeKey, xfer.RemoteAddr{}, 0) },
		func(res result) {
			if res.err == nil && res.rep.status == statusOK {
				c.release(r, res.rep.id, false)
			}
		})
	if err != nil {
		return fmt.Errorf("no answer to a probe within %v (op_timeout): %w", wait, err)
	}
	if res.rep.status == statusOK {
		c.release(r, res.rep.id, false)
	}
	return nil
}

// probeKey is the key of probe's get: one no stage name makes ('/' in a
// stage name is refused).
const probeKey = "/xfer-probe/"
