package xfer_test

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

// downPair opens a tcp server with a region "target" and a client of cfg
// that dials it, then closes the server (its listener too: its address
// refuses connections) and waits for the client to see its connection
// fail. It returns the client's engine, its peer, the region, and the
// server's address.
func downPair(t *testing.T, cfg xfer.Config) (*xfer.Engine, *xfer.Peer, xfer.RegionDesc, string) {
	t.Helper()
	ctx := context.Background()
	srv, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	target, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("target", target)
	cfg.Transport = xfer.PolicyTCP
	cli, p := openDialed(ctx, t, cfg, srv.Addr())
	desc, _ := p.Region("target")
	addr := srv.Addr()
	srv.Close()
	select {
	case <-p.Down():
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not see its server close")
	}
	return cli, p, desc, addr
}

// A dialed peer whose address refuses connections (its process is gone)
// fails an operation within Config.ReconnectWait of dialing it again (all
// of it but the last pause, at most half a second), not
// when op_timeout or the caller's deadline ends, with a *ReconnectError
// that says it refused, names the address and how long it tried; the
// next operation dials once and fails at once.
func TestReconnectRefusedFailsFast(t *testing.T) {
	cli, p, desc, addr := downPair(t, xfer.Config{MemoryMB: 8, OpTimeout: time.Minute})
	buf, err := cli.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = testutil.EndsWithin(t, 10*time.Second, func() error { return p.Read(ctx, buf.Bytes(), desc.At(0)) })
	took := time.Since(start)
	var re *xfer.ReconnectError
	if !errors.As(err, &re) || !errors.Is(err, xfer.ErrPeerLost) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("read from a peer that is gone: %v; want a *ReconnectError matching ErrPeerLost and ECONNREFUSED", err)
	}
	for _, want := range []string{addr, "refused", "reconnect_wait 2s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if took < xfer.DefaultReconnectWait*3/4 || took > xfer.DefaultReconnectWait+3*time.Second ||
		re.Tried < xfer.DefaultReconnectWait*3/4 || re.Tried > xfer.DefaultReconnectWait || re.Attempts < 2 {
		t.Errorf("failed after %v (tried %v, %d dials); want within reconnect_wait (%v), after several dials for most of it", took, re.Tried, re.Attempts, xfer.DefaultReconnectWait)
	}
	// Known to be down: the next operation fails after one dial.
	err = testutil.EndsWithin(t, time.Second, func() error { return p.Read(ctx, buf.Bytes(), desc.At(0)) })
	if !errors.As(err, &re) {
		t.Fatalf("the next read: %v; want a *ReconnectError at once", err)
	}
}

// A negative ReconnectWait fails the operation at the first refusal.
func TestReconnectWaitNegative(t *testing.T) {
	cli, p, desc, _ := downPair(t, xfer.Config{MemoryMB: 8, ReconnectWait: -1})
	buf, err := cli.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	err = testutil.EndsWithin(t, time.Second, func() error { return p.Read(context.Background(), buf.Bytes(), desc.At(0)) })
	var re *xfer.ReconnectError
	if !errors.As(err, &re) || re.Attempts != 1 {
		t.Fatalf("read with reconnect_wait -1: %v; want a *ReconnectError after one dial", err)
	}
}

// A peer that comes back within ReconnectWait (a restart) is reconnected:
// the operation waiting for it goes through.
func TestReconnectRidesAQuickRestart(t *testing.T) {
	cli, p, _, addr := downPair(t, xfer.Config{MemoryMB: 8, ReconnectWait: 10 * time.Second})
	msg, err := cli.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Send(context.Background(), msg.Bytes()) }()
	time.Sleep(300 * time.Millisecond) // it is dialing, refused
	var srv *xfer.Engine
	for range 50 { // the port may be in TIME_WAIT briefly
		if srv, err = xfer.Open(context.Background(), xfer.Config{Transport: xfer.PolicyTCP, Listen: addr, MemoryMB: 8}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := testutil.EndsWithin(t, 10*time.Second, func() error { return <-done }); err != nil {
		t.Fatalf("send across a restart within reconnect_wait: %v", err)
	}
}
