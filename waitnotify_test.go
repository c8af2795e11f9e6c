package xfer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// notifyServer opens an engine under policy that listens and exports a
// region "target"; it closes when the test ends.
func notifyServer(t *testing.T, policy xfer.Policy) *xfer.Engine {
	t.Helper()
	return targetServer(context.Background(), t, xfer.Config{Transport: policy, Listen: "127.0.0.1:0", MemoryMB: 8})
}

// targetServer opens an engine of cfg that exports a region "target" of
// 1 MiB; it closes when the test ends.
func targetServer(ctx context.Context, t *testing.T, cfg xfer.Config) *xfer.Engine {
	t.Helper()
	srv, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	target, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("target", target)
	return srv
}

// openDialed opens a client engine with cfg and dials addr from it; the
// engine closes with the test.
func openDialed(ctx context.Context, tb testing.TB, cfg xfer.Config, addr string) (*xfer.Engine, *xfer.Peer) {
	tb.Helper()
	cli, err := xfer.Open(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	p, err := cli.Dial(ctx, addr)
	if err != nil {
		tb.Fatal(err)
	}
	return cli, p
}

// notifyFrom dials addr from e and writes-with-notify 64 bytes carrying
// value into the region "target" at off.
func notifyFrom(ctx context.Context, e *xfer.Engine, addr string, off uint64, value uint32) error {
	p, err := e.Dial(ctx, addr)
	if err != nil {
		return err
	}
	desc, ok := p.Region("target")
	if !ok {
		return errors.New("no region target")
	}
	buf, err := e.Alloc(64)
	if err != nil {
		return err
	}
	defer e.Free(buf)
	return p.WriteNotify(ctx, buf.Bytes(), desc.At(off), value)
}

// wantNotification fails the test unless srv's next notification carries
// value from the engine id.
func wantNotification(t *testing.T, srv *xfer.Engine, id string, value uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := srv.WaitNotify(ctx)
	if err != nil || n.Value != value || n.Peer == nil || n.Peer.ID().String() != id {
		t.Fatalf("notification: %+v, %v; want %d from %v", n, err, value, id)
	}
}

// wantLost fails the test unless err is a *PeerLostError naming the peer
// of engine id, matching ErrPeerLost, and a stall exactly when stalled.
func wantLost(t *testing.T, err error, id string, stalled bool) *xfer.PeerLostError {
	t.Helper()
	var pl *xfer.PeerLostError
	if !errors.As(err, &pl) || !errors.Is(err, xfer.ErrPeerLost) || pl.Peer == nil || pl.Peer.ID().String() != id {
		t.Fatalf("wait notify on a peer that died: %v (%T), want a PeerLostError naming %v", err, err, id)
	}
	if errors.Is(err, xfer.ErrStalled) != stalled {
		t.Fatalf("wait notify: %v: a stall: %v, want %v", err, errors.Is(err, xfer.ErrStalled), stalled)
	}
	if !strings.Contains(err.Error(), pl.Peer.String()) {
		t.Fatalf("error %q does not name the peer %s", err, pl.Peer)
	}
	return pl
}

// Engine.WaitNotify, waiting with a context without a deadline, returns
// a *PeerLostError naming a peer whose engine closes, once, after the
// notifications it sent; the notifications of the other peers go on.
func TestEngineWaitNotifyPeerLost(t *testing.T) {
	for _, policy := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := notifyServer(t, policy)
			var clis [2]*xfer.Engine
			for i := range clis {
				cli, err := xfer.Open(ctx, xfer.Config{Transport: policy, MemoryMB: 8})
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				clis[i] = cli
				if err := notifyFrom(ctx, cli, srv.Addr(), uint64(64*i), uint32(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			wantNotification(t, srv, clis[0].ID().String(), 1)
			// The first client sends one more, then its engine closes.
			if err := notifyFrom(ctx, clis[0], srv.Addr(), 0, 3); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 4)
			go func() {
				for range 3 {
					_, err := srv.WaitNotify(context.Background())
					errc <- err
				}
			}()
			clis[0].Close()
			if err := waitEnds(t, func() error { return <-errc }); err != nil {
				t.Fatalf("the other client's notification: %v", err)
			}
			if err := waitEnds(t, func() error { return <-errc }); err != nil {
				t.Fatalf("the closing client's last notification: %v", err)
			}
			wantLost(t, waitEnds(t, func() error { return <-errc }), clis[0].ID().String(), false)
			// The other peer's notifications still come.
			if err := notifyFrom(ctx, clis[1], srv.Addr(), 64, 4); err != nil {
				t.Fatal(err)
			}
			wantNotification(t, srv, clis[1].ID().String(), 4)
			// The loss was told once.
			short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancelShort()
			if n, err := srv.WaitNotify(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait notify after the loss was told: %+v, %v; want the context's deadline", n, err)
			}
		})
	}
}

// The child of TestEngineWaitNotifyPeerKilled: it notifies the server at
// XFER_TEST_NOTIFY_ADDR once, says so, and waits to be killed.
func TestEngineWaitNotifyChild(t *testing.T) {
	addr := os.Getenv("XFER_TEST_NOTIFY_ADDR")
	if addr == "" {
		t.Skip("the child of TestEngineWaitNotifyPeerKilled")
	}
	ctx := context.Background()
	e, err := xfer.Open(ctx, xfer.Config{Transport: xfer.Policy(os.Getenv("XFER_TEST_NOTIFY_POLICY")), MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := notifyFrom(ctx, e, addr, 0, 7); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("notified %s\n", e.ID())
	time.Sleep(time.Hour)
}

// Engine.WaitNotify returns a *PeerLostError naming a peer whose process
// is killed (SIGKILL) while it waits, over tcp and shm.
func TestEngineWaitNotifyPeerKilled(t *testing.T) {
	for _, policy := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(policy), func(t *testing.T) {
			srv := notifyServer(t, policy)
			cmd := exec.Command(os.Args[0], "-test.run=^TestEngineWaitNotifyChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "XFER_TEST_NOTIFY_ADDR="+srv.Addr(), "XFER_TEST_NOTIFY_POLICY="+string(policy))
			cmd.Stderr = os.Stderr
			out := testutil.StartPiped(t, cmd)
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
			}()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("the child: %q, %v", line, err)
			}
			id := strings.TrimSpace(strings.TrimPrefix(line, "notified "))
			wantNotification(t, srv, id, 7)
			errc := make(chan error, 1)
			go func() {
				_, err := srv.WaitNotify(context.Background())
				errc <- err
			}()
			time.Sleep(50 * time.Millisecond) // it waits (a loss is told to a later wait as well)
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			wantLost(t, waitEnds(t, func() error { return <-errc }), id, false)
		})
	}
}

// Engine.WaitNotify, waiting with a context without a deadline, on a
// peer that stops (its relay freezes) returns a *PeerLostError that is a
// stall: quiet, the peer is probed, and it does not answer. A peer that
// is idle but alive answers the probes: the wait lasts as long as its
// context.
func TestEngineWaitNotifyPeerStalls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cli, p, _, r := stallPair(t, timeout, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*timeout)
	defer cancel()
	if _, err := cli.WaitNotify(ctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("wait notify with an idle live peer: %v, want the context's deadline", err)
	}
	r.freeze()
	err := waitEnds(t, func() error { _, err := cli.WaitNotify(context.Background()); return err })
	pl := wantLost(t, err, p.ID().String(), true)
	var se *xfer.StallError
	if pl.Peer != p || !errors.As(err, &se) || se.Timeout != timeout {
		t.Fatalf("wait notify on a stopped peer: %v: want a stall of %v naming %s", err, timeout, p)
	}
}
