package connector

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

// TestGetBoundLiveProducer: a Get whose ctx has no deadline, of a key a
// live producer never puts, ends at the call bound with ErrNotFound, not
// as a stall: the producer answers the probe.
func TestGetBoundLiveProducer(t *testing.T) {
	tp := tport{policy: xfer.PolicyTCP}
	_, c := pair(t, tp, PullWrite, func(p, c *Config) { c.CallTimeout = 500 * time.Millisecond })
	err := testutil.EndsWithin(t, 30*time.Second, func() error {
		_, _, err := c.Get(context.Background(), "a", "b", "never", nil)
		return err
	})
	var se *StalledError
	if !errors.Is(err, ErrNotFound) || errors.Is(err, xfer.ErrStalled) || errors.As(err, &se) || !strings.Contains(err.Error(), "alive") {
		t.Fatalf("get of a key a live producer never puts: %v; want ErrNotFound that says the producer is alive", err)
	}
}

// TestGetBoundStalledProducer: a Get whose ctx has no deadline, from a
// producer that holds the connection open but never answers (an engine
// that drops every message: stopped, hung), ends at the call bound with a
// *StalledError that names the producer and matches xfer.ErrStalled.
func TestGetBoundStalledProducer(t *testing.T) {
	ctx := ctxT(t)
	mute, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			p, err := mute.Accept(ctx)
			if err != nil {
				return
			}
			p.Handle(func([]byte) {}) // drops every request
		}
	}()
	c := open(t, Config{Role: RoleConsumer, Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16, OpTimeout: 500 * time.Millisecond},
		Producer: mute.Addr(), CallTimeout: 500 * time.Millisecond})
	for _, pull := range []string{"meta", "addr"} {
		err := testutil.EndsWithin(t, 30*time.Second, func() error {
			var m *Meta
			if pull == "meta" {
				m = &Meta{Producer: mute.Addr(), Kind: KindBytes, Size: 100}
			}
			_, _, err := c.Get(context.Background(), "a", "b", "k", m)
			return err
		})
		var se *StalledError
		if !errors.As(err, &se) || !errors.Is(err, xfer.ErrStalled) || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), mute.Addr()) {
			t.Fatalf("get (%s) from a producer that never answers: %v; want a *StalledError naming %s", pull, err, mute.Addr())
		}
		t.Logf("%s: %v", pull, err)
	}
}

// TestGetProducerDies: a Get waiting on a producer that dies (its engine
// closed: listener and connections) fails with ErrPeerLost, naming it.
func TestGetProducerDies(t *testing.T) {
	tp := tport{policy: xfer.PolicyTCP}
	p, c := pair(t, tp, PullWrite, nil)
	errc := make(chan error, 1)
	go func() { _, _, err := c.Get(context.Background(), "a", "b", "later", nil); errc <- err }()
	time.Sleep(300 * time.Millisecond) // the get waits at the producer
	addr := p.Addr()
	p.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, xfer.ErrPeerLost) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("get from a producer that died: %v; want ErrPeerLost naming %s", err, addr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the get still waits 30s after its producer died")
	}
}
