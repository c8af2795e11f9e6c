package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
)

// A connection whose rdma_cm setup fails on the way (here the acceptor's
// listener is gone when the dialer connects: a real refusal by the peer's
// CM) is set up again with a new handshake. Dial succeeds, the retry is
// counted, and a WRITE over the new connection lands.
func TestCMSetupRetried(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 4, RDMA: verbs.Config{Device: dev, UseCM: true}}
	srv := openServer(ctx, t, cfg)
	verbs.DropListener(true)
	t.Cleanup(func() { verbs.DropListener(false) })
	cli, err := dialWrite(ctx, cfg, srv.Addr(), srv.DefaultRegion(), 8192, 0x5a)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if n := cli.SetupRetries(); n != 1 {
		t.Fatalf("%d setup retries, want 1", n)
	}
}
