package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// A synchronous small operation is completed by the goroutine that posted
// it, polling the CQ itself, rather than handed over by the poller (with the
// event channel and with busy polling), and the data is right: 8-byte
// WRITEs travel inline.
func TestCallerPolls(t *testing.T) {
	for _, mode := range []bool{true, false} {
		t.Run(fmt.Sprint("event_channel=", mode), func(t *testing.T) {
			dev := testutil.RequireVerbs(t)
			p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev, UseEventChannel: mode}}}, "")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			desc, _ := p.Peer.Region("target")
			buf, _ := p.Client.Alloc(8)
			back, _ := p.Client.Alloc(8)
			before := verbs.SyncPolled()
			const n = 200
			for i := range n {
				for j := range buf.Bytes() {
					buf.Bytes()[j] = byte(i + j)
				}
				at := uint64(i%64) * 8
				if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(at)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(p.Target.Bytes()[at:at+8], buf.Bytes()) {
					t.Fatalf("write %d did not land", i)
				}
				if err := p.Peer.Read(ctx, back.Bytes(), desc.At(at)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back.Bytes(), buf.Bytes()) {
					t.Fatalf("read %d returned other bytes", i)
				}
			}
			got := verbs.SyncPolled() - before
			t.Logf("%d of %d operations completed by their caller's poll", got, 2*n)
			if got == 0 {
				t.Fatalf("no operation of %d was completed by its caller's poll", 2*n)
			}
		})
	}
}

// An operation posted by SubmitInto, which nobody waits for at once (a
// pipeline posts more behind it), is left in flight: Post returns at once
// instead of polling for it, as it does for a call. Batch.Wait then polls
// for it itself, as a call would.
func TestPipelinedPostDoesNotPoll(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, _ := p.Peer.Region("target")
	buf, _ := p.Client.Alloc(64)
	var b xfer.Batch
	ops := make([]xfer.Op, 1)
	before := verbs.SyncPolled()
	const n = 200
	inFlight := 0
	for i := range n {
		ops[0] = xfer.Op{Kind: xfer.OpRead, Local: buf.Bytes(), Remote: desc.At(uint64(i%8) * 64)}
		p.Peer.SubmitInto(&b, ops)
		if !b.Done() {
			inFlight++
		}
		if err := b.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	polled := verbs.SyncPolled() - before
	t.Logf("%d of %d READs still in flight when SubmitInto returned; %d completed by Wait's own poll", inFlight, n, polled)
	if inFlight < n/2 {
		t.Fatalf("only %d of %d pipelined READs were in flight when SubmitInto returned: Post waited for the others", inFlight, n)
	}
	if polled == 0 {
		t.Fatalf("no READ of %d was completed by Wait's own poll", n)
	}
}
