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

// A Submit of several WRITEs, or READs, posts each queue pair's requests
// of all of them as one chain, one ibv_post_send per queue pair, as a
// single large operation does: on SoftRoCE each call does the device's
// work in the caller, and a chain per piece starved the other queue pair
// and drew retransmission timeouts. The bytes land where they should.
func TestSubmitPostsOneChainPerQP(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, ok := p.Peer.Region("target")
	if !ok {
		t.Fatal("no target")
	}
	const pieces, piece = 8, 512 << 10
	src, err := p.Client.Alloc(pieces * piece)
	if err != nil {
		t.Fatal(err)
	}
	back, err := p.Client.Alloc(pieces * piece)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + i>>12)
	}
	// One WRITE first: the peer's region is attached, the queue pairs are up.
	if err := p.Peer.Write(ctx, src.Bytes()[:4096], desc.At(0)); err != nil {
		t.Fatal(err)
	}
	qps := verbs.DefaultQPsPerPeer
	for _, kind := range []xfer.OpKind{xfer.OpWrite, xfer.OpRead} {
		local := src
		if kind == xfer.OpRead {
			local = back
		}
		ops := make([]xfer.Op, pieces)
		for i := range ops {
			ops[i] = xfer.Op{Kind: kind, Local: local.Bytes()[i*piece : (i+1)*piece], Remote: desc.At(uint64(i * piece))}
		}
		before := verbs.RDMAPosts()
		if err := p.Peer.Submit(ops).Wait(ctx); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if n := verbs.RDMAPosts() - before; n > uint64(qps) {
			t.Errorf("%d %ss of %d KiB took %d ibv_post_send calls, want one per queue pair (%d)", pieces, kind, piece>>10, n, qps)
		}
	}
	if !bytes.Equal(p.Target.Bytes()[:pieces*piece], src.Bytes()) {
		t.Error("the WRITEs left other bytes in the peer's memory")
	}
	if !bytes.Equal(back.Bytes(), src.Bytes()) {
		t.Error("the READs brought back other bytes")
	}
}
