package xfer

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

const straySecret = "the-secret-of-the-strays-test"

// TestDialRedialsWhenDropped: a dialer whose handshake the listener drops
// before its welcome (a listener evicting it among strays) dials again,
// within its handshake_timeout, and connects; a listener that keeps
// dropping it fails the dial when that has passed.
func TestDialRedialsWhenDropped(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	// The first two connections are dropped at once, then the engine
	// takes the port.
	srv := make(chan *Engine, 1)
	go func() {
		for range 2 {
			if nc, err := ln.Accept(); err == nil {
				nc.Close()
			}
		}
		ln.Close()
		e, err := Open(ctx, Config{Listen: addr, Transport: PolicyTCP, MemoryMB: 2, Secret: straySecret})
		if err != nil {
			t.Error(err)
		}
		srv <- e
	}()
	c, err := Open(ctx, Config{Transport: PolicyTCP, MemoryMB: 2, Secret: straySecret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Dial(ctx, addr); err != nil {
		t.Fatalf("dial after two drops: %v", err)
	}
	if e := <-srv; e != nil {
		e.Close()
	}
	// A listener that drops every connection: the dial fails once its
	// handshake_timeout has passed, saying so.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Close()
		}
	}()
	short, err := Open(ctx, Config{Transport: PolicyTCP, MemoryMB: 2, HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if _, err := short.Dial(ctx, ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "closed the connection before the handshake ended") {
		t.Fatalf("dial to a listener that drops every connection: %v", err)
	}
}

// TestListenerAmongStrays: strays fill a listener's gate beyond its
// bounds; the oldest are evicted and counted, the gate never holds more
// than its bound, and a peer that dials meanwhile connects.
func TestListenerAmongStrays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Open(ctx, Config{Listen: "127.0.0.1:0", Transport: PolicyTCP, MemoryMB: 2, Secret: straySecret,
		HandshakeTimeout: 5 * time.Second, Security: SecurityConfig{MaxPendingHandshakes: 8, MaxPendingPerSource: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	stop := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(stop) }) }
	defer end()
	// Idle strays only: without the gate they would hold their places
	// for the whole handshake_timeout.
	flood := testutil.Flood(srv.Addr(), []testutil.Stray{testutil.StrayIdle}, 100, 8, stop)
	for deadline := time.Now().Add(20 * time.Second); srv.pending.Evictions() < 50; time.Sleep(5 * time.Millisecond) {
		if n := srv.pending.Pending(); n > 4 {
			t.Fatalf("%d connections pending from one source, above its bound of 4", n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d evictions: want the oldest idle strays evicted", srv.pending.Evictions())
		}
	}
	c, err := Open(ctx, Config{Transport: PolicyTCP, MemoryMB: 2, Secret: straySecret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Dial(ctx, srv.Addr()); err != nil {
		t.Fatalf("a peer among strays: %v", err)
	}
	end()
	flood()
	var evicted uint64
	for _, f := range srv.Status().AuthFailures {
		if f.Plane == PlanePeer && f.Reason == ReasonEvicted {
			evicted = f.Count
		}
	}
	if evicted == 0 {
		t.Fatalf("refusals %+v: want the evictions counted", srv.Status().AuthFailures)
	}
}
