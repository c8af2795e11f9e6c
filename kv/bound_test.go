package kv

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestCallBoundServerGone: a call whose context has no deadline ends by the
// client's call bound when its server is gone (its listener and
// connections closed), with a *StalledError that names the server and
// matches ErrUnavailable, on both request paths.
func TestCallBoundServerGone(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t, ServerOptions{})
			c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, Requests: mode, CallTimeout: time.Second})
			ctx := context.Background()
			if err := c.Put(ctx, "k", pattern(100<<10, 1)); err != nil {
				t.Fatal(err)
			}
			s.stop()
			calls := map[string]func() error{
				"get":    func() error { _, err := c.Get(ctx, "k"); return err },
				"put":    func() error { return c.Put(ctx, "k", pattern(100<<10, 2)) },
				"delete": func() error { return c.Delete(ctx, "k") },
				"stats":  func() error { _, err := c.Stats(ctx); return err },
			}
			for op, call := range calls {
				err := endsWithin(t, 30*time.Second, call)
				// It fails at once when it finds no session to the server,
				// or waits for the server until the bound.
				if !errors.Is(err, ErrUnavailable) || errors.Is(err, xfer.ErrStalled) || !strings.Contains(err.Error(), s.addr) {
					t.Fatalf("%s from a server that is gone: %v; want an error naming %s, matching ErrUnavailable", op, err, s.addr)
				}
				var se *StalledError
				if errors.As(err, &se) && (se.Op != op || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "gone")) {
					t.Fatalf("%s: %v: want a timeout of %s that says the server is gone", op, err, op)
				}
			}
		})
	}
}

// TestCallBoundContextWins: a context's deadline, not the call bound,
// bounds a call that has one, and a negative CallTimeout turns the bound
// off.
func TestCallBoundContextWins(t *testing.T) {
	s := startServer(t, ServerOptions{})
	c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, CallTimeout: -1})
	if c.callTimeout != 0 {
		t.Fatalf("CallTimeout -1: bound %v, want none", c.callTimeout)
	}
	d := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16, OpTimeout: 2 * time.Second}})
	if d.callTimeout != CallTimeoutFactor*2*time.Second {
		t.Fatalf("op_timeout 2s: bound %v, want %v", d.callTimeout, CallTimeoutFactor*2*time.Second)
	}
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := endsWithin(t, 30*time.Second, func() error { _, err := d.Get(ctx, "x"); return err })
	var se *StalledError
	if errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a deadline from a server that is gone: %v; want the context's error", err)
	}
}

// endsWithin runs call and fails the test unless it returns within d.
func endsWithin(t *testing.T, d time.Duration, call func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("the call still waits after %v", d)
		return nil
	}
}

// TestCallBoundGenerations: a context without a deadline, whether it can
// never end (context.Background, values over it: the calls of a
// generation share its end) or can (a cancel: a timer context of its
// own), gets the call bound: it ends between one bound and nine eighths
// of one, says the bound ended it, keeps its values, and ends the
// contexts derived from it.
func TestCallBoundGenerations(t *testing.T) {
	const bound = 200 * time.Millisecond
	type key struct{}
	cancelled, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancel()
	for _, tc := range []struct {
		name   string
		parent context.Context
	}{
		{"background", context.Background()},
		{"values", context.WithValue(context.Background(), key{}, "v")},
		{"cancel", cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{callTimeout: bound}
			defer c.stopGenerations()
			start := time.Now()
			ctx, done := c.bound(tc.parent)
			defer done()
			if d, ok := ctx.Deadline(); !ok || d.Before(start.Add(bound)) || d.After(start.Add(bound*9/8+50*time.Millisecond)) {
				t.Fatalf("deadline %v, %v; want one bound from now", d.Sub(start), ok)
			}
			if tc.parent.Value(key{}) != ctx.Value(key{}) {
				t.Fatal("the bounded context lost its parent's values")
			}
			child, stop := context.WithCancel(ctx)
			defer stop()
			select {
			case <-child.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the bound never ended the call's context")
			}
			if took := time.Since(start); took < bound {
				t.Fatalf("ended after %v, before the bound of %v", took, bound)
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !boundEnded(ctx) {
				t.Fatalf("err %v, ended by the bound: %v", ctx.Err(), boundEnded(ctx))
			}
			if !errors.Is(child.Err(), context.Canceled) && !errors.Is(child.Err(), context.DeadlineExceeded) {
				t.Fatalf("derived context: %v", child.Err())
			}
			// A call in a later generation gets a bound of its own.
			later, done2 := c.bound(tc.parent)
			defer done2()
			if later.Err() != nil {
				t.Fatalf("a new call's context has already ended: %v", later.Err())
			}
		})
	}
}

// valueCtx is a context whose type is not a pointer: a value of it cannot
// be compared safely, so the generation never keeps it.
type valueCtx struct {
	context.Context
	tags []string
}

// TestCallBoundSharedParents: calls over one cancelable parent in a
// generation share one timer context, without allocating; cancelling the
// parent ends it with the parent's error, not as a bound; parents beyond
// the generation's slots, and parents that are not pointers, get a timer
// context per call, bounded all the same.
func TestCallBoundSharedParents(t *testing.T) {
	const bound = time.Minute
	c := &Client{callTimeout: bound}
	defer c.stopGenerations()
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, doneA := c.bound(parent)
	b, doneB := c.bound(parent)
	doneA()
	doneB()
	if a != b {
		t.Fatal("two calls over one parent in one generation got two contexts")
	}
	if n := testing.AllocsPerRun(100, func() { _, done := c.bound(parent); done() }); n != 0 {
		t.Errorf("a bound over a kept parent allocates %v times", n)
	}
	// The other slots, then one parent too many.
	var others []context.Context
	for range boundSlots - 1 {
		p, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx, done := c.bound(p)
		done()
		others = append(others, ctx)
	}
	extra, cancelExtra := context.WithCancel(context.Background())
	defer cancelExtra()
	e1, done1 := c.bound(extra)
	e2, done2 := c.bound(extra)
	if e1 == e2 {
		t.Error("a parent beyond the slots shares a context")
	}
	for _, ctx := range []context.Context{e1, e2} {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) < bound*7/8 {
			t.Errorf("a parent beyond the slots: deadline %v, %v", time.Until(d), ok)
		}
	}
	done1()
	if e1.Err() == nil {
		t.Error("a per-call context survives its call's end")
	}
	done2()
	// A parent that is not a pointer.
	v := valueCtx{Context: parent, tags: []string{"x"}}
	if ctx, done := c.bound(v); ctx == a {
		t.Error("a value context shares a kept parent's context")
	} else {
		done()
	}
	// Cancelling the parent ends the shared context with its error.
	cancel()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the shared context did not end with its parent")
	}
	if !errors.Is(a.Err(), context.Canceled) || boundEnded(a) {
		t.Errorf("after the parent's cancel: %v, ended by the bound: %v", a.Err(), boundEnded(a))
	}
	for _, o := range others {
		if o.Err() != nil {
			t.Errorf("another parent's context ended with this one: %v", o.Err())
		}
	}
}
