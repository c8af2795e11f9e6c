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
// as a stall: the producer answers the probe. By default the bound is
// within op_timeout; CallTimeout sets a bound of its own.
func TestGetBoundLiveProducer(t *testing.T) {
	tp := tport{policy: xfer.PolicyTCP}
	for _, tc := range []struct {
		name  string
		mod   func(p, c *Config)
		bound time.Duration
	}{
		{"op_timeout", func(p, c *Config) { c.Engine.OpTimeout = time.Second }, time.Second},
		{"call_timeout", func(p, c *Config) { c.CallTimeout = 1500 * time.Millisecond }, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := pair(t, tp, PullWrite, tc.mod)
			start := time.Now()
			err := testutil.EndsWithin(t, 30*time.Second, func() error {
				_, _, err := c.Get(context.Background(), "a", "b", "never", nil)
				return err
			})
			took := time.Since(start)
			var se *StalledError
			if !errors.Is(err, ErrNotFound) || errors.Is(err, xfer.ErrStalled) || errors.As(err, &se) || !strings.Contains(err.Error(), "alive") {
				t.Fatalf("get of a key a live producer never puts: %v; want ErrNotFound that says the producer is alive", err)
			}
			if took < tc.bound*3/4 || took > tc.bound+time.Second {
				t.Errorf("ended after %v; want about %v", took, tc.bound)
			}
		})
	}
}

// TestGetBoundStalledProducer: a Get whose ctx has no deadline, from a
// producer that holds the connection open but never answers (an engine
// that drops every message: stopped, hung), ends at the call bound with a
// *StalledError that names the producer and matches xfer.ErrStalled: by
// default within op_timeout, and at CallTimeout when it is set.
func TestGetBoundStalledProducer(t *testing.T) {
	for _, tc := range []struct {
		name        string
		callTimeout time.Duration
		within      time.Duration
		says        string
	}{{"op_timeout", 0, time.Second, "(op_timeout)"}, {"call_timeout", 500 * time.Millisecond, 500*time.Millisecond + time.Second, "(call_timeout)"}} {
		t.Run(tc.name, func(t *testing.T) { testGetBoundStalledProducer(t, tc.callTimeout, tc.within, tc.says) })
	}
}

// TestGetLongDeadline: a Get whose caller gave a deadline far past
// op_timeout (the Python binding's get_timeout of 30 s) still fails within
// about op_timeout when its producer never answers, because the Get probes
// its producer each call bound; from a live producer it waits on, past
// several bounds, for a key put later.
func TestGetLongDeadline(t *testing.T) {
	t.Run("stalled", func(t *testing.T) { testGetBoundStalledProducer(t, -1, time.Second, "(op_timeout)") })
	t.Run("live", func(t *testing.T) {
		p, c := pair(t, tport{policy: xfer.PolicyTCP}, PullWrite, func(p, c *Config) { c.Engine.OpTimeout = 500 * time.Millisecond })
		ctx := ctxT(t)
		put := time.AfterFunc(2*time.Second, func() { p.Put(ctx, "a", "b", "late", []byte("v")) })
		defer put.Stop()
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		b, n, err := c.Get(gctx, "a", "b", "late", nil)
		if err != nil {
			t.Fatalf("get of a key a live producer puts after 4 call bounds, with a 30 s deadline: %v", err)
		}
		defer b.Release()
		if n != 1 {
			t.Errorf("got %d bytes; want 1", n)
		}
	})
}

// testGetBoundStalledProducer: callTimeout -1 gives each Get a caller's
// deadline of 30 s instead of none.
func testGetBoundStalledProducer(t *testing.T, callTimeout, within time.Duration, says string) {
	ctx := ctxT(t)
	deadline := callTimeout < 0
	callTimeout = max(callTimeout, 0)
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
	c := open(t, Config{Role: RoleConsumer, Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16, OpTimeout: time.Second},
		Producer: mute.Addr(), CallTimeout: callTimeout})
	for _, pull := range []string{"meta", "addr"} {
		start := time.Now()
		err := testutil.EndsWithin(t, 30*time.Second, func() error {
			var m *Meta
			if pull == "meta" {
				m = &Meta{Producer: mute.Addr(), Kind: KindBytes, Size: 100}
			}
			gctx := context.Background()
			if deadline {
				var cancel context.CancelFunc
				gctx, cancel = context.WithTimeout(gctx, 30*time.Second)
				defer cancel()
			}
			_, _, err := c.Get(gctx, "a", "b", "k", m)
			return err
		})
		var se *StalledError
		if !errors.As(err, &se) || !errors.Is(err, xfer.ErrStalled) || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), mute.Addr()) {
			t.Fatalf("get (%s) from a producer that never answers: %v; want a *StalledError naming %s", pull, err, mute.Addr())
		}
		if took := time.Since(start); took > within+time.Second || !strings.Contains(err.Error(), says) {
			t.Errorf("get (%s) failed after %v: %v; want within %v, saying %s", pull, took, err, within, says)
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

// getThenClose puts value under "k" at p, gets it at c, which is
// connected to p from then on, then closes p; it returns p's address.
func getThenClose(t *testing.T, p, c *Connector, value string) string {
	t.Helper()
	ctx := context.Background()
	if _, _, err := p.Put(ctx, "a", "b", "k", []byte(value)); err != nil {
		t.Fatal(err)
	}
	b, _, err := c.Get(ctx, "a", "b", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	addr := p.Addr()
	p.Close()
	return addr
}

// TestGetProducerGoneFailsFast: a Get from a producer that is gone (its
// engine closed: its address refuses) fails after the engine's
// reconnect_wait, not op_timeout, with an error that names the producer,
// says it refused and for how long; a Get while it is known to be down
// fails at once.
func TestGetProducerGoneFailsFast(t *testing.T) {
	tp := tport{policy: xfer.PolicyTCP}
	p, c := pair(t, tp, PullWrite, func(p, c *Config) { c.Engine.OpTimeout = time.Minute })
	ctx := context.Background()
	addr := getThenClose(t, p, c, "v")
	get := func() error { _, _, err := c.Get(ctx, "a", "b", "k", nil); return err }
	// A Get that meets the broken connection before the consumer saw it
	// break fails at once, as one under way when its producer died does
	// (TestGetProducerDies).
	var re *xfer.ReconnectError
	if err := testutil.EndsWithin(t, xfer.DefaultReconnectWait+time.Second, get); !errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("get from a producer that just died: %v; want ErrPeerLost", err)
	}
	for i, limit := range []time.Duration{xfer.DefaultReconnectWait + time.Second, time.Second} {
		start := time.Now()
		err := testutil.EndsWithin(t, limit, get)
		if !errors.As(err, &re) || !errors.Is(err, xfer.ErrPeerLost) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("get %d from a producer that is gone, after %v: %v; want a *xfer.ReconnectError naming %s, saying refused", i, time.Since(start), err, addr)
		}
		if i == 0 && (re.Tried < xfer.DefaultReconnectWait*3/4 || re.Tried > xfer.DefaultReconnectWait) {
			t.Errorf("gave up after %v; want most of reconnect_wait, and no more", re.Tried)
		}
	}
}

// TestGetRidesThroughRestart: with CallTimeout set, a Get from a producer
// that is down waits for it: a producer back at the same address that
// puts the key answers it.
func TestGetRidesThroughRestart(t *testing.T) {
	tp := tport{policy: xfer.PolicyTCP}
	p, c := pair(t, tp, PullWrite, func(p, c *Config) { c.CallTimeout = 30 * time.Second })
	ctx := context.Background()
	addr := getThenClose(t, p, c, "v1")
	got := make(chan error, 1)
	go func() {
		b, _, err := c.Get(ctx, "a", "b", "k2", nil)
		if err == nil {
			if string(b.Bytes()) != "v2" {
				err = errors.New("got " + string(b.Bytes()))
			}
			b.Release()
		}
		got <- err
	}()
	time.Sleep(xfer.DefaultReconnectWait + 500*time.Millisecond) // past reconnect_wait
	cfg := producerConfig(tp, PullWrite)
	cfg.Engine.Listen = addr
	var p2 *Connector
	var err error
	for range 50 { // the port may be in TIME_WAIT briefly
		if p2, err = Open(ctx, cfg); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, _, err := p2.Put(ctx, "a", "b", "k2", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := testutil.EndsWithin(t, 20*time.Second, func() error { return <-got }); err != nil {
		t.Fatalf("get across the producer's restart, riding through: %v", err)
	}
}
