package connector

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHealthStatus checks that Health judges what it reports: a full pool
// and a failed operation make a connector unhealthy until they pass, a
// consumer lost while waiting is counted, and a closed connector says so.
func TestHealthStatus(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		p, c := pair(t, tp, PullAuto, nil)
		ctx := ctxT(t)
		if h := p.Health(); h.Status != "healthy" || len(h.Problems) != 0 {
			t.Fatalf("a fresh producer: %+v", h)
		}
		size := p.Health().PoolSize
		if _, _, err := p.Put(ctx, "a", "b", "full", make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		if h := p.Health(); h.Status != "unhealthy" || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], "pool is full") {
			t.Fatalf("a full pool: %+v", h)
		}
		if _, err := p.Cleanup("a", "b", "full"); err != nil {
			t.Fatal(err)
		}
		if h := p.Health(); h.Status != "healthy" {
			t.Fatalf("after cleanup: %+v", h)
		}
		if _, _, err := p.Put(ctx, "a", "b", "none", []byte("v"), Consumers(0)); err == nil {
			t.Fatal("a put for no consumer succeeded")
		}
		if h := p.Health(); h.Status != "unhealthy" || !strings.Contains(h.LastError, "at least one consumer") {
			t.Fatalf("after a failed put: %+v", h)
		}
		if _, _, err := p.Put(ctx, "a", "b", "ok", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if h := p.Health(); h.Status != "healthy" || h.LastError != "" {
			t.Fatalf("after a put that succeeded: %+v", h)
		}

		// A get of a key not put yet is an answer, not a fault.
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, _, err := c.Get(short, "a", "b", "later", nil); err == nil {
			t.Fatal("a get of a key never put succeeded")
		}
		if h := c.Health(); h.Status != "healthy" || h.Timeouts != 1 {
			t.Fatalf("consumer after a get that timed out: %+v", h)
		}
		// The abandoned get's cancel reaches the producer (after the get
		// returned): its wait ends there.
		eventually(t, "the abandoned get's wait to end", func() bool { return p.Health().Waiting == 0 })

		// A consumer whose engine goes away while its get waits (a crash:
		// no Close to end the get first) is a lost peer.
		done := make(chan struct{})
		go func() { c.Get(ctx, "a", "b", "never", nil); close(done) }()
		eventually(t, "a waiting get", func() bool { return p.Health().Waiting == 1 })
		c.eng.Close()
		eventually(t, "a lost peer", func() bool { return p.Health().PeersLost == 1 })
		<-done
		c.Close()
		if h := c.Health(); h.Status != "closed" {
			t.Fatalf("closed consumer: %+v", h)
		}
	})
}

// TestStored checks that Stored follows a value from its put to its taking
// and to its cleanup, and refuses bad names and a closed connector.
func TestStored(t *testing.T) {
	p, c := pair(t, transports(t)[0], PullAuto, nil)
	ctx := ctxT(t)
	stored := func(key string) bool {
		t.Helper()
		ok, err := p.Stored("a", "b", key)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if stored("k") {
		t.Fatal("stored before its put")
	}
	for _, k := range []string{"k", "gone"} {
		if _, _, err := p.Put(ctx, "a", "b", k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if !stored("k") || !stored("gone") {
		t.Fatal("not stored after its put")
	}
	b, _, err := c.Get(ctx, "a", "b", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	eventually(t, "taken", func() bool { return !stored("k") })
	if _, err := p.Cleanup("a", "b", "gone"); err != nil || stored("gone") {
		t.Fatalf("after cleanup: stored %v, %v", stored("gone"), err)
	}
	if _, err := p.Stored("a", "b", ""); err == nil {
		t.Fatal("an empty key: no error")
	}
	p.Close()
	if _, err := p.Stored("a", "b", "k"); err == nil {
		t.Fatal("a closed connector: no error")
	}
}
