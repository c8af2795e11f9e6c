package xfer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

// TestSubmitFromReceivePath: a one-sided operation submitted from a message
// handler (the transport's receive path) completes, without waiting there.
// On shm, the first access to a peer's region used to attach it with
// a round trip whose answer needed the very receive path that was waiting
// in Submit: the handler and the connection hung.
func TestSubmitFromReceivePath(t *testing.T) {
	for _, policy := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pair := xfertest.NewPair(t, xfertest.Options{Policy: policy}, "")
			a, b, pb, target := pair.Server, pair.Client, pair.Peer, pair.Target
			// b writes into a's region whatever a asks for, from its handler.
			src, err := b.Alloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			for i := range src.Bytes() {
				src.Bytes()[i] = byte(i*7 + 1)
			}
			done := make(chan error, 1)
			pb.Handle(func(msg []byte) {
				d, err := xfer.ParseRegionDesc(string(msg))
				if err != nil {
					done <- err
					return
				}
				ops := []xfer.Op{{Kind: xfer.OpWriteNotify, Local: src.Bytes(), Remote: d.At(0), Value: 7}}
				batch := pb.Submit(ops)
				go func() { done <- batch.Wait(ctx) }()
			})
			pa, err := a.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := a.Alloc(512)
			if err != nil {
				t.Fatal(err)
			}
			n := copy(msg.Bytes(), target.Desc().String())
			if err := pa.Send(ctx, msg.Bytes()[:n]); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("the write submitted from the handler never completed")
			}
			nt, err := a.WaitNotify(ctx)
			if err != nil || nt.Value != 7 {
				t.Fatalf("notification %+v, %v", nt, err)
			}
			if !bytes.Equal(target.Bytes()[:4096], src.Bytes()) {
				t.Fatal("the region does not hold what was written")
			}
		})
	}
}
