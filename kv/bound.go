package kv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
)

// Every call of a Client ends: by its context's deadline, or, when the
// context has none, by the client's call bound (ClientOptions.CallTimeout),
// so that a server that stopped (SIGSTOP, a hung host) or died cannot hold
// a caller forever.

// CallTimeoutFactor is how many of the client engine's op_timeout make the
// default call bound (ClientOptions.CallTimeout): 30 s with the default
// op_timeout of 10 s.
const CallTimeoutFactor = 3

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

// errCallBound is the cause of a context that the call bound ended.
var errCallBound = fmt.Errorf("the call bound was reached: %w", context.DeadlineExceeded)

// callTimeout returns the call bound of a client whose options are opts
// and whose engine is e: 0 for none.
func callTimeout(opts ClientOptions, e *xfer.Engine) time.Duration {
	switch {
	case opts.CallTimeout < 0:
		return 0
	case opts.CallTimeout > 0:
		return opts.CallTimeout
	}
	if t := e.Config().OpTimeout; t > 0 {
		return CallTimeoutFactor * t
	}
	return 0
}

func nop() {}

// bound returns ctx limited by the client's call bound when it has no
// deadline of its own.
//
// A context that can never end (its Done is nil: context.Background, or
// values over it) is bounded without a context of its own per call: calls
// join a generation (callGen) that the client opens at most once per
// eighth of the bound, and whose Done closes one bound after the
// generation opened plus that eighth. So each such call ends between one
// bound and nine eighths of one after it began, and costs no allocation
// (context.Background) or one (a context with values), where a timer
// context costs five.
//
// A context that can end (a cancel, no deadline) is bounded by a timer
// context over it, which also ends when its parent does. Calls that share
// such a parent (the usual case: a program's or a worker's context) share
// that timer context too: the generation keeps one for each of its first
// few parents, with the generation's end as its deadline, so those calls
// too cost no allocation. Any further parent gets a timer context of its
// own per call.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.callTimeout <= 0 {
		return ctx, nop
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, nop
	}
	g := c.generation()
	if ctx.Done() == nil {
		if ctx == context.Background() {
			return &g.bg, nop
		}
		return &boundCtx{Context: ctx, g: g}, nop
	}
	if b := g.over(ctx); b != nil {
		return b, nop
	}
	return context.WithTimeoutCause(ctx, c.callTimeout, errCallBound)
}

// boundSlots is how many cancelable parents a generation keeps a shared
// timer context for.
const boundSlots = 4

// parentBound is a generation's timer context over one parent. Its
// deadline, the generation's end, ends it with errCallBound, or its
// parent ends first; cancel is never called, so that it ends as a bound
// and not as a cancel.
type parentBound struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
}

// over returns the generation's timer context over parent, made on first
// use, or nil when the generation keeps one for as many other parents as
// it may. Only parents that are pointers are kept: they compare by
// identity, and comparing them cannot panic.
func (g *callGen) over(parent context.Context) context.Context {
	if reflect.TypeOf(parent).Kind() != reflect.Pointer {
		return nil
	}
	for i := range g.parents {
		p := g.parents[i].Load()
		if p == nil {
			break
		}
		if p.parent == parent {
			return p.ctx
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.parents {
		p := g.parents[i].Load()
		if p == nil {
			ctx, cancel := context.WithDeadlineCause(parent, g.end, errCallBound)
			g.parents[i].Store(&parentBound{parent: parent, ctx: ctx, cancel: cancel})
			return ctx
		}
		if p.parent == parent {
			return p.ctx // another call made it meanwhile
		}
	}
	return nil
}

// callGen is a generation of calls bounded together: its done closes at
// end, by a timer the generation's first call set.
type callGen struct {
	opened time.Time
	end    time.Time
	done   chan struct{}
	timer  *time.Timer
	bg     boundCtx // the generation's context over context.Background

	mu    sync.Mutex
	ended bool
	after map[*func()]struct{} // AfterFunc's functions, run when it ends

	// parents are the generation's timer contexts over cancelable
	// parents (over), filled in order under mu.
	parents [boundSlots]atomic.Pointer[parentBound]
}

// expire ends the generation: its contexts are done.
func (g *callGen) expire() {
	g.mu.Lock()
	g.ended = true
	close(g.done)
	after := g.after
	g.after = nil
	g.mu.Unlock()
	for f := range after {
		go (*f)()
	}
}

// afterFunc runs f in a goroutine of its own once g ends, unless the
// function it returns is called first (context.AfterFunc's contract). The
// contexts that gRPC derives from a bounded context register here, rather
// than each watching it from a goroutine.
func (g *callGen) afterFunc(f func()) func() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		go f()
		return func() bool { return false }
	}
	if g.after == nil {
		g.after = make(map[*func()]struct{})
	}
	k := &f
	g.after[k] = struct{}{}
	return func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, ok := g.after[k]
		delete(g.after, k)
		return ok
	}
}

// generation returns the current generation of bounded calls, opening a
// new one when the current one opened an eighth of the bound ago or more.
func (c *Client) generation() *callGen {
	now := time.Now()
	step := c.callTimeout / 8
	if g := c.gen.Load(); g != nil && now.Sub(g.opened) < step {
		return g
	}
	c.genMu.Lock()
	defer c.genMu.Unlock()
	if g := c.gen.Load(); g != nil && now.Sub(g.opened) < step {
		return g // another call opened it meanwhile
	}
	g := &callGen{opened: now, end: now.Add(c.callTimeout + step), done: make(chan struct{})}
	g.bg = boundCtx{Context: context.Background(), g: g}
	g.timer = time.AfterFunc(c.callTimeout+step, g.expire)
	c.gen.Store(g)
	return g
}

// stopGenerations stops the current generation's timer (Client.Close).
func (c *Client) stopGenerations() {
	c.genMu.Lock()
	defer c.genMu.Unlock()
	if g := c.gen.Load(); g != nil {
		g.timer.Stop()
	}
}

// boundCtx is a context that never ends (Context) bounded by the
// generation g: it ends, with context.DeadlineExceeded, when g does.
type boundCtx struct {
	context.Context
	g *callGen
}

func (b *boundCtx) Deadline() (time.Time, bool) { return b.g.end, true }
func (b *boundCtx) Done() <-chan struct{}       { return b.g.done }

// AfterFunc lets a context derived from b end with it without a
// goroutine of its own (see context.AfterFunc).
func (b *boundCtx) AfterFunc(f func()) func() bool { return b.g.afterFunc(f) }

func (b *boundCtx) Err() error {
	select {
	case <-b.g.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// boundEnded reports whether the call bound ended ctx, a context from bound.
func boundEnded(ctx context.Context) bool {
	if b, ok := ctx.(*boundCtx); ok {
		return b.Err() != nil
	}
	return errors.Is(context.Cause(ctx), errCallBound)
}

// bounded turns err, how call op ended under ctx (from bound), into a
// *StalledError when the call bound ended it.
func (c *Client) bounded(ctx context.Context, op string, err error) error {
	if err == nil || !boundEnded(ctx) {
		return err
	}
	if p := c.dialErr.Load(); p != nil && !errors.Is(err, ErrUnavailable) {
		// gRPC waited for a server it could not connect to.
		err = fmt.Errorf("%w (%w)", err, &unavailableError{target: c.target, msg: (*p).Error()})
	}
	return &StalledError{Op: op, Server: c.target, Bound: c.callTimeout, Err: err}
}
