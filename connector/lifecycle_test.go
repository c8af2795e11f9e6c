package connector

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestLifecycle is the lifecycle test class of vLLM-Omni's Mooncake
// connector guide: Close, deferred Close and double Close, and what comes
// after: every operation fails with net.ErrClosed, gets in flight end, and
// buffers handed out before are harmless. TestMain checks that nothing
// leaks.
func TestLifecycle(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		t.Run("Close", func(t *testing.T) {
			p, c := pair(t, tp, PullAuto, nil)
			for _, x := range []*Connector{p, c} {
				if err := x.Close(); err != nil {
					t.Fatal(err)
				}
				if h := x.Health(); !h.Closed {
					t.Errorf("health after close: %+v", h)
				}
			}
		})
		t.Run("DeferredClose", func(t *testing.T) {
			var p *Connector
			func() {
				var err error
				p, err = Open(context.Background(), producerConfig(tp, PullAuto))
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if _, _, err := p.Put(ctxT(t), "a", "b", "k", random(1000)); err != nil {
					t.Fatal(err)
				}
			}()
			if _, _, err := p.Put(ctxT(t), "a", "b", "k", random(1000)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("put after the deferred close: %v", err)
			}
		})
		t.Run("DoubleClose", func(t *testing.T) {
			p, c := pair(t, tp, PullAuto, nil)
			for range 3 {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
		t.Run("AfterClose", func(t *testing.T) { testAfterClose(t, tp) })
		for _, pull := range pulls {
			t.Run("GetInFlight/"+pull.String(), func(t *testing.T) { testGetInFlight(t, tp, pull) })
			t.Run("ProducerCloses/"+pull.String(), func(t *testing.T) { testProducerCloses(t, tp, pull) })
		}
		t.Run("ReleaseAfterClose", func(t *testing.T) {
			p, c := pair(t, tp, PullAuto, func(p, c *Config) { p.Role = RoleBoth })
			ctx := ctxT(t)
			if _, _, err := p.Put(ctx, "a", "b", "k", random(4096)); err != nil {
				t.Fatal(err)
			}
			got, _, err := c.Get(ctx, "a", "b", "k", nil)
			if err != nil {
				t.Fatal(err)
			}
			unpublished, err := p.AllocTensor(ctx, F64, []int64{16})
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			p.Close()
			for _, b := range []*Buffer{got, unpublished} {
				if err := b.Release(); err != nil {
					t.Errorf("release after close: %v", err)
				}
				if err := b.Close(); err != nil {
					t.Errorf("close after close: %v", err)
				}
				if b.Bytes() != nil {
					t.Error("bytes of a buffer after its connector closed")
				}
			}
		})
	})
}

func testAfterClose(t *testing.T, tp tport) {
	p, c := pair(t, tp, PullAuto, func(p, c *Config) { c.Role, c.Engine.Listen = RoleBoth, "127.0.0.1:0" })
	ctx := ctxT(t)
	m := Meta{Producer: p.Addr()}
	p.Close()
	c.Close()
	for _, x := range []*Connector{p, c} {
		for name, err := range map[string]error{
			"put":       second(x.Put(ctx, "a", "b", "k", []byte("v"))),
			"put empty": second(x.Put(ctx, "a", "b", "k", []byte{})),
			"alloc":     errOf(x.AllocBytes(ctx, 10)),
			"tensor":    errOf(x.AllocTensor(ctx, U8, []int64{10})),
			"cleanup":   errOf(x.Cleanup("a", "b", "k")),
		} {
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%v: %s after close: %v, want net.ErrClosed", x.Role(), name, err)
			}
		}
	}
	if _, _, err := c.Get(ctx, "a", "b", "k", &m); !errors.Is(err, net.ErrClosed) {
		t.Errorf("get after close: %v, want net.ErrClosed", err)
	}
	if _, _, err := c.Get(ctx, "a", "b", "k", nil, NoWait()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("get after close: %v, want net.ErrClosed", err)
	}
}

func second[A, B any](_ A, _ B, err error) error { return err }

func errOf[A any](_ A, err error) error { return err }

// testGetInFlight closes a consumer while its Get waits for a key.
func testGetInFlight(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Get(ctx, "a", "b", "k", nil)
		done <- err
	}()
	eventually(t, "waiting", func() bool { return p.Health().Waiting == 1 })
	c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("get in flight at close: %v, want net.ErrClosed", err)
	}
	// The producer drops the waiter of the consumer that went away.
	eventually(t, "no waiter", func() bool { return p.Health().Waiting == 0 })
}

// testProducerCloses closes the producer while a consumer's Get waits for
// a key: the Get ends with an error before its deadline.
func testProducerCloses(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Get(ctx, "a", "b", "k", nil)
		done <- err
	}()
	eventually(t, "waiting", func() bool { return p.Health().Waiting == 1 })
	p.Close()
	err := <-done
	if !errors.Is(err, xfer.ErrPeerLost) || ctx.Err() != nil {
		t.Fatalf("get when the producer closed: %v (ctx: %v)", err, ctx.Err())
	}
	t.Log(err)
	if h := c.Health(); h.PoolUsed != 0 {
		t.Errorf("consumer health %+v", h)
	}
}
