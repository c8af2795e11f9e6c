package callbound

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGenerations: a context without a deadline, whether it can
// never end (context.Background, values over it: the calls of a
// generation share its end) or can (a cancel: a timer context of its
// own), gets the call bound: it ends between seven eighths of one bound
// and one bound, never later, says the bound ended it, keeps its values, and ends the
// contexts derived from it.
func TestGenerations(t *testing.T) {
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
			c := New(bound)
			defer c.Stop()
			start := time.Now()
			ctx, done := c.Bound(tc.parent)
			defer done()
			if d, ok := ctx.Deadline(); !ok || d.Before(start.Add(bound*7/8)) || d.After(start.Add(bound+50*time.Millisecond)) {
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
			if took := time.Since(start); took < bound*7/8 {
				t.Fatalf("ended after %v, before seven eighths of the bound of %v", took, bound)
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !Ended(ctx) {
				t.Fatalf("err %v, ended by the bound: %v", ctx.Err(), Ended(ctx))
			}
			if !errors.Is(child.Err(), context.Canceled) && !errors.Is(child.Err(), context.DeadlineExceeded) {
				t.Fatalf("derived context: %v", child.Err())
			}
			// A call in a later generation gets a bound of its own.
			later, done2 := c.Bound(tc.parent)
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

// TestSharedParents: calls over one cancelable parent in a
// generation share one timer context, without allocating; cancelling the
// parent ends it with the parent's error, not as a bound; parents beyond
// the generation's slots, and parents that are not pointers, get a timer
// context per call, bounded all the same.
func TestSharedParents(t *testing.T) {
	const bound = time.Minute
	c := New(bound)
	defer c.Stop()
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, doneA := c.Bound(parent)
	b, doneB := c.Bound(parent)
	doneA()
	doneB()
	if a != b {
		t.Fatal("two calls over one parent in one generation got two contexts")
	}
	if n := testing.AllocsPerRun(100, func() { _, done := c.Bound(parent); done() }); n != 0 {
		t.Errorf("a bound over a kept parent allocates %v times", n)
	}
	// The other slots, then one parent too many.
	var others []context.Context
	for range boundSlots - 1 {
		p, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx, done := c.Bound(p)
		done()
		others = append(others, ctx)
	}
	extra, cancelExtra := context.WithCancel(context.Background())
	defer cancelExtra()
	e1, done1 := c.Bound(extra)
	e2, done2 := c.Bound(extra)
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
	if ctx, done := c.Bound(v); ctx == a {
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
	if !errors.Is(a.Err(), context.Canceled) || Ended(a) {
		t.Errorf("after the parent's cancel: %v, ended by the bound: %v", a.Err(), Ended(a))
	}
	for _, o := range others {
		if o.Err() != nil {
			t.Errorf("another parent's context ended with this one: %v", o.Err())
		}
	}
}

// TestNoBound: a nil Bounder, and one of no timeout, leave every context
// as it is.
func TestNoBound(t *testing.T) {
	for _, b := range []*Bounder{nil, New(0), New(-time.Second)} {
		ctx, done := b.Bound(context.Background())
		done()
		if ctx != context.Background() || b.Timeout() != 0 {
			t.Errorf("%v: bounded to %v", b.Timeout(), ctx)
		}
		b.Stop()
	}
}

func TestResolve(t *testing.T) {
	for _, c := range []struct{ d, op, want time.Duration }{
		{0, 10 * time.Second, 10 * time.Second},
		{0, -1, 0},
		{0, 0, 0},
		{-1, 10 * time.Second, 0},
		{5 * time.Second, 10 * time.Second, 5 * time.Second},
		{5 * time.Second, 0, 5 * time.Second},
	} {
		if got := Resolve(c.d, c.op); got != c.want {
			t.Errorf("Resolve(%v, %v) = %v, want %v", c.d, c.op, got, c.want)
		}
	}
}
