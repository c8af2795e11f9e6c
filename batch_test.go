package xfer_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

// TestSubmitInto reuses one Batch for submissions of different lengths,
// with errors and without, and checks the data, Done, repeated Waits and
// that a resubmission of no more operations allocates nothing.
func TestSubmitInto(t *testing.T) {
	for _, policy := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pair := xfertest.NewPair(t, xfertest.Options{Policy: policy}, "")
			b, p, target := pair.Client, pair.Peer, pair.Target
			for i := range target.Bytes()[:64<<10] {
				target.Bytes()[i] = byte(i * 31)
			}
			d, _ := p.Region("target")
			local, err := b.Alloc(16 << 10)
			if err != nil {
				t.Fatal(err)
			}
			page := func(i int) []byte { return local.Bytes()[i*4096 : (i+1)*4096] }

			var batch xfer.Batch
			ops := make([]xfer.Op, 4)
			for round, n := range []int{1, 4, 2, 0, 4, 1} {
				for i := range n {
					clear(page(i))
					ops[i] = xfer.Op{Kind: xfer.OpRead, Local: page(i), Remote: d.At(uint64((round+i)%16) * 4096)}
				}
				p.SubmitInto(&batch, ops[:n])
				for range 2 { // a done batch answers every Wait
					if err := batch.Wait(ctx); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if !batch.Done() {
					t.Fatalf("round %d: waited, yet not done", round)
				}
				for i := range n {
					off := (round + i) % 16 * 4096
					if !bytes.Equal(page(i), target.Bytes()[off:off+4096]) {
						t.Fatalf("round %d, op %d: wrong data", round, i)
					}
				}
			}

			// An operation that fails, then one that succeeds: the
			// batch's error is its latest submission's.
			ops[0] = xfer.Op{Kind: xfer.OpRead, Local: make([]byte, 4096), Remote: d.At(0)}
			p.SubmitInto(&batch, ops[:1])
			if err := batch.Wait(ctx); !errors.Is(err, xfer.ErrNotRegistered) || !errors.Is(ops[0].Err, xfer.ErrNotRegistered) {
				t.Fatalf("a heap buffer: %v, op: %v", err, ops[0].Err)
			}
			ops[0] = xfer.Op{Kind: xfer.OpRead, Local: page(0), Remote: d.At(0)}
			p.SubmitInto(&batch, ops[:1])
			if err := batch.Wait(ctx); err != nil || ops[0].Err != nil {
				t.Fatalf("after an error: %v, op: %v", err, ops[0].Err)
			}

			// Resubmitting without waiting, once Done says so, is allowed.
			for range 100 {
				p.SubmitInto(&batch, ops[:1])
				for !batch.Done() {
				}
			}
			if err := batch.Wait(ctx); err != nil {
				t.Fatal(err)
			}

			ops[1] = xfer.Op{Kind: xfer.OpRead, Local: page(1), Remote: d.At(4096)}
			if n := testing.AllocsPerRun(200, func() {
				p.SubmitInto(&batch, ops[:2])
				if err := batch.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}); n > 0 {
				t.Errorf("%v allocations per resubmission, want 0", n)
			}
		})
	}
}
