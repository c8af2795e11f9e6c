package xfer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// A Batch.Wait whose ctx ends while the transport cannot take its
// operations back (over tcp, WRITEs sent by reference from memfd memory)
// returns at once, as Peer.Write does, abandoning them: their bytes stay
// held, freed or not, until the transport is done with them.
func TestBatchWaitAbandons(t *testing.T) {
	ctx := context.Background()
	cli, p, desc, r, buf := byReferencePair(t)
	pool := cli.Pool()
	r.freeze()
	b := p.Submit([]xfer.Op{
		{Kind: xfer.OpWrite, Local: buf.Bytes()[:128<<10], Remote: desc.At(0)},
		{Kind: xfer.OpWrite, Local: buf.Bytes()[128<<10:], Remote: desc.At(128 << 10)},
	})
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- b.Wait(cctx) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		r.unfreeze()
		t.Fatal("Batch.Wait still waits 30s after its ctx ended")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("batch past its deadline: %v, want an abandoned DeadlineExceeded", err)
	}
	if b.Done() {
		t.Fatal("an abandoned batch reports done while the peer is stopped")
	}
	if err := pool.Free(buf.Buffer); err != nil {
		t.Fatal(err)
	}
	if s := pool.Stats(); s.InUse != 256<<10 {
		t.Fatalf("after the abandoned batch's buffer was freed: %d bytes in use, want its 256 KiB held", s.InUse)
	}
	// Once the peer moves again the WRITEs complete, and the bytes come back.
	r.unfreeze()
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("the abandoned batch, once the peer moved again: %v", err)
	}
	for i := 0; pool.Stats().InUse != 0; i++ {
		if i == 500 {
			t.Fatalf("the abandoned batch's bytes never came back: %d bytes in use", pool.Stats().InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
