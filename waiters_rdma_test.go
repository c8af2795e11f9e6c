package xfer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// waitersTimeout is the op_timeout of the rdma waiters' tests.
const waitersTimeout = 200 * time.Millisecond

// rdmaPairOpTimeout opens a server engine over rdma (the test device) that
// exports a 1 MiB region as "target", and a client engine dialed to it,
// both with op_timeout timeout; it skips without verbs. The engines close
// with the test.
func rdmaPairOpTimeout(t *testing.T, timeout time.Duration) (context.Context, *xfer.Engine, *xfer.Engine, *xfer.Peer) {
	t.Helper()
	dev := testutil.RequireVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg := xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 8, OpTimeout: timeout}
	cfg.RDMA.Device = dev
	srv := targetServer(ctx, t, cfg)
	cfg.Listen = ""
	cli, p := openDialed(ctx, t, cfg, srv.Addr())
	if p.Transport() != "rdma" {
		t.Fatalf("connected over %s, want rdma", p.Transport())
	}
	return ctx, srv, cli, p
}

// Over rdma, the probes of a quiet peer with waiters are answered (the
// region is looked up over the control connection, by the peer's
// process), and they leave the connection as it was: a Recv on an idle
// live peer ends by its context, and a WRITE on the same connection
// still works. It needs verbs (the VM: make verbs-test).
func TestWaitersIdleLivePeerRDMA(t *testing.T) {
	ctx, _, cli, p := rdmaPairOpTimeout(t, waitersTimeout)
	rctx, rcancel := context.WithTimeout(ctx, 10*waitersTimeout)
	defer rcancel()
	if _, err := p.Recv(rctx, make([]byte, 64)); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, xfer.ErrStalled) {
		t.Fatalf("recv on an idle live peer over rdma: %v, want the context's deadline", err)
	}
	buf, err := cli.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	desc, _ := p.Region("target")
	if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("a write after the probes: %v", err)
	}
}

// Over rdma, Engine.WaitNotify probes a quiet peer as Recv does: with an
// idle live peer it waits as long as its context; it returns the peer's
// notification; and once the peer's engine closes, a *PeerLostError
// naming it. It needs verbs (the VM: make verbs-test).
func TestEngineWaitNotifyRDMA(t *testing.T) {
	ctx, srv, cli, _ := rdmaPairOpTimeout(t, waitersTimeout)
	wctx, wcancel := context.WithTimeout(ctx, 10*waitersTimeout)
	defer wcancel()
	if _, err := srv.WaitNotify(wctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("wait notify with an idle live peer over rdma: %v, want the context's deadline", err)
	}
	if err := notifyFrom(ctx, cli, srv.Addr(), 0, 9); err != nil {
		t.Fatal(err)
	}
	wantNotification(t, srv, cli.ID().String(), 9)
	cli.Close()
	err := waitEnds(t, func() error { _, err := srv.WaitNotify(context.Background()); return err })
	wantLost(t, err, cli.ID().String(), false)
}
