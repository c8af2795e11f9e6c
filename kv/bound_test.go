package kv

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
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
				err := testutil.EndsWithin(t, 30*time.Second, call)
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
	err := testutil.EndsWithin(t, 30*time.Second, func() error { _, err := d.Get(ctx, "x"); return err })
	var se *StalledError
	if errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a deadline from a server that is gone: %v; want the context's error", err)
	}
}
