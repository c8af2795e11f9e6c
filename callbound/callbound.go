// Package callbound bounds calls whose context has no deadline, so that
// every call of a client ends: the KV client's and the connector's calls
// end by their context's deadline, or, when it has none, by a call bound
// (the engine's op_timeout, or their CallTimeout when set to ride through
// a restart), after which the caller can tell a peer that stalled or died.
//
// Bounding a call costs no allocation in the usual cases, where a timer
// context per call costs five: calls whose context can never end join a
// generation whose end they share, and calls over a cancelable parent
// share a timer context per generation and parent.
package callbound

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Cause is the cause (context.Cause) of a context that a call bound ended.
var Cause = fmt.Errorf("the call bound was reached: %w", context.DeadlineExceeded)

// Resolve returns the call bound that a configured CallTimeout d gives
// over an engine whose op_timeout is opTimeout: d when positive (a longer
// bound, chosen to ride through a peer's restart), none (0) when
// negative, and, when d is 0, opTimeout: a peer that does not answer
// within it is as stalled as one that moves no byte (none when opTimeout
// is 0 or less).
func Resolve(d, opTimeout time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > 0:
		return d
	}
	return max(opTimeout, 0)
}

// Bounder bounds calls by timeout. Its zero value bounds nothing; New
// makes one.
type Bounder struct {
	timeout time.Duration
	// gen is the current generation of calls bounded together; mu
	// serializes opening one.
	gen atomic.Pointer[callGen]
	mu  sync.Mutex
}

// New returns a Bounder whose calls end at most timeout after they began
// (up to an eighth sooner); 0 or less bounds nothing.
func New(timeout time.Duration) *Bounder { return &Bounder{timeout: max(timeout, 0)} }

// Timeout returns the call bound; 0 for none.
func (b *Bounder) Timeout() time.Duration {
	if b == nil {
		return 0
	}
	return b.timeout
}

func nop() {}

// Bound returns ctx limited by the call bound when it has no deadline of
// its own, and the function that releases what it holds (call it when the
// call is done).
//
// A context that can never end (its Done is nil: context.Background, or
// values over it) is bounded without a context of its own per call: calls
// join a generation (callGen) that the Bounder opens at most once per
// eighth of the bound, and whose Done closes one bound after the
// generation opened. So each such call ends between seven eighths of the
// bound and one bound after it began (never later: a bound is a promise
// to the caller), and costs no allocation
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
//
// A nil Bounder bounds nothing.
func (b *Bounder) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b == nil || b.timeout <= 0 {
		return ctx, nop
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, nop
	}
	g := b.generation()
	if ctx.Done() == nil {
		if ctx == context.Background() {
			return &g.bg, nop
		}
		return &boundCtx{Context: ctx, g: g}, nop
	}
	if bc := g.over(ctx); bc != nil {
		return bc, nop
	}
	return context.WithTimeoutCause(ctx, b.timeout, Cause)
}

// boundSlots is how many cancelable parents a generation keeps a shared
// timer context for.
const boundSlots = 4

// parentBound is a generation's timer context over one parent. Its
// deadline, the generation's end, ends it with Cause, or its
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
	if g.parents[boundSlots-1].Load() != nil {
		return nil // every slot is another parent's: no lock on this path
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.parents {
		p := g.parents[i].Load()
		if p == nil {
			ctx, cancel := context.WithDeadlineCause(parent, g.end, Cause)
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
func (b *Bounder) generation() *callGen {
	now := time.Now()
	step := b.timeout / 8
	if g := b.gen.Load(); g != nil && now.Sub(g.opened) < step {
		return g
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gen.Load(); g != nil && now.Sub(g.opened) < step {
		return g // another call opened it meanwhile
	}
	g := &callGen{opened: now, end: now.Add(b.timeout), done: make(chan struct{})}
	g.bg = boundCtx{Context: context.Background(), g: g}
	g.timer = time.AfterFunc(b.timeout, g.expire)
	b.gen.Store(g)
	return g
}

// Stop stops the current generation's timer (when its user closes).
func (b *Bounder) Stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gen.Load(); g != nil {
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

// Ended reports whether the call bound ended ctx, a context from Bound.
func Ended(ctx context.Context) bool {
	if b, ok := ctx.(*boundCtx); ok {
		return b.Err() != nil
	}
	return errors.Is(context.Cause(ctx), Cause)
}
