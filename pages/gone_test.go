package pages

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// TestServerGoneFailsFast: a fetch from a server that is gone (closed: its
// address refuses connections) fails after the engine's reconnect_wait,
// not op_timeout, with an error that names the server, says it refused
// and how long the client tried; while it stays down a fetch fails at
// once.
func TestServerGoneFailsFast(t *testing.T) {
	for _, policy := range policies(t) {
		t.Run(string(policy), func(t *testing.T) {
			s := newServer(t, policy, 1<<20, 1)
			cfg := engineConfig(t, policy)
			cfg.OpTimeout = time.Minute
			c, err := NewClient(context.Background(), ClientConfig{Engine: cfg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			if err := c.AddNode(ctx, s.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			bufs, err := c.Alloc(1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Free(bufs) })
			if err := c.FetchPage(ctx, 0, bufs[0].Bytes()); err != nil {
				t.Fatal(err)
			}
			addr := s.Addr()
			s.Close()
			for i, limit := range []time.Duration{xfer.DefaultReconnectWait + 2*time.Second, time.Second} {
				err := testutil.EndsWithin(t, limit, func() error { return c.FetchPage(ctx, uint64(i+1)*uint64(c.PageSize()), bufs[0].Bytes()) })
				var re *xfer.ReconnectError
				if !errors.As(err, &re) || !errors.Is(err, xfer.ErrPeerLost) || !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("fetch %d from a server that is gone: %v; want a *xfer.ReconnectError, refused", i, err)
				}
				for _, want := range []string{addr, "refused", "reconnect_wait"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("fetch %d: the error does not say %q: %v", i, want, err)
					}
				}
				if re.Tried < xfer.DefaultReconnectWait*3/4 {
					t.Errorf("fetch %d: gave up after %v, well before reconnect_wait", i, re.Tried)
				}
			}
		})
	}
}
