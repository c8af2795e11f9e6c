package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// WRITEs travel inline. Meanwhile a busy poller naps, unless poll_nap is
// negative.
func TestCallerPolls(t *testing.T) {
	for _, c := range []struct {
		event bool
		nap   time.Duration
	}{{true, 0}, {false, verbs.DefaultPollNap}, {false, -1}} {
		mode := c.event
		t.Run(fmt.Sprintf("event_channel=%v/poll_nap=%v", c.event, c.nap), func(t *testing.T) {
			dev := testutil.RequireVerbs(t)
			p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev, UseEventChannel: mode, PollNap: c.nap}}}, "")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			desc, _ := p.Peer.Region("target")
			buf, _ := p.Client.Alloc(8)
			back, _ := p.Client.Alloc(8)
			before, napsBefore := verbs.SyncPolled(), verbs.PollerNaps()
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
			// A busy poller naps while callers take every completion,
			// rather than spinning on a CPU beside them.
			naps := verbs.PollerNaps() - napsBefore
			switch {
			case !mode && c.nap > 0 && naps == 0:
				t.Fatalf("the busy poller never napped while %d calls polled for themselves", 2*n)
			case (mode || c.nap < 0) && naps > 0:
				t.Fatalf("the poller napped %d times (event channel %v, poll_nap %v)", naps, mode, c.nap)
			}
		})
	}
}

// An operation posted by SubmitInto, which nobody waits for at once (a
// pipeline posts more behind it), is left to the poller: Post returns at
// once instead of polling for it, as it does for a call. Its Batch.Wait
// then polls for it (transport.Poller), rather than waiting for the
// poller's hand-off.
func TestPipelinedPostDoesNotPoll(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, _ := p.Peer.Region("target")
	buf, _ := p.Client.Alloc(64)
	var b xfer.Batch
	ops := make([]xfer.Op, 1)
	var byPost, byWait uint64
	for i := range 200 {
		ops[0] = xfer.Op{Kind: xfer.OpRead, Local: buf.Bytes(), Remote: desc.At(uint64(i%8) * 64)}
		before := verbs.SyncPolled()
		p.Peer.SubmitInto(&b, ops)
		posted := verbs.SyncPolled()
		if err := b.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		byPost += posted - before
		byWait += verbs.SyncPolled() - posted
	}
	if byPost != 0 {
		t.Fatalf("%d of 200 pipelined READs were polled for by their poster", byPost)
	}
	t.Logf("%d of 200 pipelined READs were polled for by their waiter", byWait)
	if byWait == 0 {
		t.Fatal("no pipelined READ of 200 was polled for by its waiter (Batch.Wait)")
	}
}

// A peer closed while other goroutines post and poll for their own
// operations fails those operations with an error: none of them touches the
// endpoint's CQ after it left it (this crashed a consumer whose stale
// connection was closed under its first Send).
func TestCallerPollsWhileClosing(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	for round := range 10 {
		p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		desc, _ := p.Peer.Region("target")
		var wg sync.WaitGroup
		var ok atomic.Uint64
		errs := make(chan error, 4)
		for w := range 4 {
			buf, err := p.Client.Alloc(8)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for {
					if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(uint64(w)*8)); err != nil {
						errs <- err
						return
					}
					ok.Add(1)
				}
			})
		}
		for ok.Load() < 50 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		p.Peer.Close()
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: a write was still waiting a minute after the close: %v", round, err)
			}
		}
	}
}
