package xfer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// waitEnds runs wait and fails the test unless it returns within a minute.
func waitEnds(t *testing.T, wait func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- wait() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the wait still waits a minute after its peer stopped")
		return nil
	}
}

// A Recv or a WaitNotify, with a context without a deadline, on a peer
// that stops (its relay freezes) fails with a *StallError that names the
// peer and the op_timeout: quiet, the peer is probed, and it does not
// answer.
func TestWaitersStalledPeer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		op   string
		wait func(p *xfer.Peer) error
	}{
		{"recv", func(p *xfer.Peer) error { _, err := p.Recv(context.Background(), make([]byte, 64)); return err }},
		{"wait notify", func(p *xfer.Peer) error { _, err := p.WaitNotify(context.Background()); return err }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			_, p, _, r := stallPair(t, timeout, 0)
			r.freeze()
			err := waitEnds(t, func() error { return tc.wait(p) })
			var se *xfer.StallError
			if !errors.As(err, &se) || !errors.Is(err, xfer.ErrStalled) || !errors.Is(err, xfer.ErrClosed) {
				t.Fatalf("%s on a stopped peer: %v (%T), want a StallError", tc.op, err, err)
			}
			for _, want := range []string{tc.op, r.addr(), "op_timeout", timeout.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

// A Recv on a peer that is alive but sends nothing waits as long as its
// context: the probes are answered. Its context's deadline ends it, not
// a stall.
func TestWaitersIdleLivePeer(t *testing.T) {
	const timeout = 200 * time.Millisecond
	_, p, _, _ := stallPair(t, timeout, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*timeout)
	defer cancel()
	_, err := p.Recv(ctx, make([]byte, 64))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, xfer.ErrStalled) {
		t.Fatalf("recv on an idle live peer: %v, want the context's deadline", err)
	}
}

// A Recv or a WaitNotify on a peer whose connection breaks (its relay
// closes every connection: the peer died) fails with ErrPeerLost, naming
// the peer, also on a peer this engine dialed.
func TestWaitersPeerDies(t *testing.T) {
	for _, op := range []string{"recv", "wait notify"} {
		t.Run(op, func(t *testing.T) {
			_, p, _, r := stallPair(t, 10*time.Second, 0)
			errc := make(chan error, 1)
			go func() {
				var err error
				if op == "recv" {
					_, err = p.Recv(context.Background(), make([]byte, 64))
				} else {
					_, err = p.WaitNotify(context.Background())
				}
				errc <- err
			}()
			time.Sleep(100 * time.Millisecond) // it waits
			r.cut()
			err := waitEnds(t, func() error { return <-errc })
			if !errors.Is(err, xfer.ErrPeerLost) || errors.Is(err, xfer.ErrStalled) || !strings.Contains(err.Error(), r.addr()) {
				t.Fatalf("%s on a peer that died: %v, want ErrPeerLost naming %s", op, err, r.addr())
			}
		})
	}
}

// Peer.WaitNotify returns the notifications of its own peer, in order,
// and leaves those of other peers to them.
func TestPeerWaitNotify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	target, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("target", target)
	var peers, inbound [2]*xfer.Peer
	var clis [2]*xfer.Engine
	for i := range peers {
		cli, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		clis[i] = cli
		if peers[i], err = cli.Dial(ctx, srv.Addr()); err != nil {
			t.Fatal(err)
		}
		if inbound[i], err = srv.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	}
	desc, _ := peers[0].Region("target")
	for i, p := range peers {
		buf, err := clis[i].Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		for v := range uint32(3) {
			if err := p.WriteNotify(ctx, buf.Bytes(), desc.At(uint64(64*i)), uint32(10*i)+v); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each inbound peer's WaitNotify finds its own, whichever wrote first.
	for _, i := range []int{1, 0} {
		from := inbound[i]
		if clis[i].ID() != from.ID() {
			from = inbound[1-i]
		}
		for v := range uint32(3) {
			n, err := from.WaitNotify(ctx)
			if err != nil || n.Peer != from || n.Value != uint32(10*i)+v {
				t.Fatalf("peer %d's notification %d: %+v, %v", i, v, n, err)
			}
		}
	}
}
