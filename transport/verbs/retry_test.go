package verbs_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// A connection whose rdma_cm setup fails on the way (here the acceptor's
// listener is gone when the dialer connects: a real refusal by the peer's
// CM) is set up again with a new handshake. Dial succeeds, the retry is
// counted, and data moves over the new connection.
func TestCMSetupRetried(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	verbs.DropListener(true)
	t.Cleanup(func() { verbs.DropListener(false) })
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMADevice: dev, RDMAUseCM: true}}, "")
	if p.Peer.Transport() != "rdma" {
		t.Fatalf("transport %s", p.Peer.Transport())
	}
	if n := p.Client.SetupRetries(); n != 1 {
		t.Fatalf("%d setup retries, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	buf, err := p.Client.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Client.Free(buf)
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i*7 + 3)
	}
	desc, ok := p.Peer.Region("target")
	if !ok {
		t.Fatal("no target region")
	}
	if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(8192)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Target.Bytes()[8192:8192+4096], buf.Bytes()) {
		t.Fatal("the write over the retried connection did not land")
	}
}
