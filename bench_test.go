package xfer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

// BenchmarkWrite and BenchmarkRead measure one synchronous operation at a
// time (queue depth 1) between two engines in this process, and report
// allocations: in steady state an operation must allocate nothing.
func BenchmarkWrite(b *testing.B) { benchOp(b, xfer.OpWrite) }

// BenchmarkRead: see BenchmarkWrite.
func BenchmarkRead(b *testing.B) { benchOp(b, xfer.OpRead) }

func benchOp(b *testing.B, kind xfer.OpKind) {
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		for _, size := range []int{64, 4096, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%d", pol, size), func(b *testing.B) {
				p := xfertest.NewPair(b, xfertest.Options{Policy: pol}, "")
				desc, _ := p.Peer.Region("target")
				buf, err := p.Client.Alloc(size)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				op := p.Peer.Write
				if kind == xfer.OpRead {
					op = p.Peer.Read
				}
				for range 100 { // warm up: pools, maps, attachments
					if err := op(ctx, buf.Bytes(), desc.At(0)); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := op(ctx, buf.Bytes(), desc.At(0)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
