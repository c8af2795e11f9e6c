package connector

import (
	"context"
	"errors"
	"net"
	"testing"
)

// TestStop checks that Stop ends the connector's work but not its memory:
// a get waiting and every later call fail with net.ErrClosed, while a
// Buffer handed out before stays readable and writable until Close.
func TestStop(t *testing.T) {
	p, c := pair(t, transports(t)[0], PullAuto, nil)
	ctx := ctxT(t)
	if _, _, err := p.Put(ctx, "a", "b", "k", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	b, _, err := c.Get(ctx, "a", "b", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, _, err := c.Get(ctx, "a", "b", "never", nil); waiting <- err }()
	eventually(t, "a waiting get", func() bool { return p.Health().Waiting == 1 })
	c.Stop()
	if err := <-waiting; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the get waiting at Stop: %v, want net.ErrClosed", err)
	}
	if _, _, err := c.Get(context.Background(), "a", "b", "k", nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a get after Stop: %v, want net.ErrClosed", err)
	}
	if got := string(b.Bytes()); got != "kept" {
		t.Fatalf("a buffer after Stop reads %q", got)
	}
	b.Bytes()[0] = 'K'
	c.Stop() // idempotent
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
