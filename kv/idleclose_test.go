package kv

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
)

// A Cluster's clients share its request buffers; it closes the connection
// to a server no operation used for IdleClose, counts it, and connects
// again at the next operation.
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
	// Its request buffers are the cluster's, shared by every server's
	// client, with a share of its own.
	if m := c.snap.Load().ms[0]; m.cl.msgs != c.msgs || cap(m.cl.msgShare) != clientMsgBufs {
		t.Fatalf("the client's request buffers: %p (share %d), want the cluster's %p (share %d)", m.cl.msgs, cap(m.cl.msgShare), c.msgs, clientMsgBufs)
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

// A client of shared request buffers holds at most its share of them, so
// that a server that does not answer cannot take the others' too.
func TestSharedRequestBufs(t *testing.T) {
	m := &msgBufs{free: make(chan []byte, 4), size: 8}
	for range 4 {
		m.free <- make([]byte, 8)
	}
	a := &Client{msgs: m, msgShare: make(chan struct{}, 2)}
	b := &Client{msgs: m, msgShare: make(chan struct{}, 2)}
	ctx := context.Background()
	var held [][]byte
	for range 2 {
		buf, err := a.getMsg(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, buf)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := a.getMsg(short); err == nil {
		t.Fatal("a client took more than its share")
	}
	for range 2 { // the other client's share is untouched
		buf, err := b.getMsg(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer b.putMsg(buf)
	}
	a.putMsg(held[0])
	if buf, err := a.getMsg(ctx); err != nil {
		t.Fatalf("after giving one back: %v", err)
	} else {
		a.putMsg(buf)
	}
	a.putMsg(held[1])
}
