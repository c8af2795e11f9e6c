package kv

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
)

// A Cluster closes the connection to a server no operation used for
// IdleClose, counts it, and connects again at the next operation.
func TestClusterIdleClose(t *testing.T) {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serveInProcess(t, xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 8,
		Directory: coord.URL, NodeID: "kv-idle", DirectoryTTL: 2 * time.Second})
	c, err := DialCluster(ctx, ClusterOptions{Directory: coord.URL, IdleClose: time.Second,
		Client: ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, "the server", func() bool { return len(c.Servers()) == 1 })
	put := func() {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := c.Put(ctx, "k", []byte("v"))
			if err == nil {
				return
			}
			if time.Now().After(end) {
				t.Fatal(err)
			}
		}
	}
	put()
	connected := func() bool {
		m := c.snap.Load().ms[0]
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.cl != nil
	}
	// (The put may have waited for the new server to take writes, long
	// enough to be closed in between.)
	base := c.IdleClosed()
	if !connected() {
		t.Fatal("not connected after a put")
	}
	// Busy: used every 100 ms, it stays.
	for range 8 {
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !connected() || c.IdleClosed() != base {
		t.Fatalf("while used: connected %v, %d closed, want %d", connected(), c.IdleClosed(), base)
	}
	waitFor(t, 10*time.Second, "the idle connection closed", func() bool { return !connected() && c.IdleClosed() == base+1 })
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("get after the idle close: %q, %v", v, err)
	}
	if !connected() {
		t.Fatal("the get did not connect again")
	}
}
