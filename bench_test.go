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
				op := warmOp(b, pol, kind, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					op()
				}
			})
		}
	}
}

// warmOp connects two engines in this process over pol and returns one
// synchronous operation of kind and size between them, run 100 times
// first to warm up pools, maps and attachments. It fails tb on error.
func warmOp(tb testing.TB, pol xfer.Policy, kind xfer.OpKind, size int) func() {
	p := xfertest.NewPair(tb, xfertest.Options{Policy: pol}, "")
	desc, _ := p.Peer.Region("target")
	buf, err := p.Client.Alloc(size)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	do := p.Peer.Write
	if kind == xfer.OpRead {
		do = p.Peer.Read
	}
	op := func() {
		if err := do(ctx, buf.Bytes(), desc.At(0)); err != nil {
			tb.Fatal(err)
		}
	}
	for range 100 {
		op()
	}
	return op
}

// TestOpAllocs: in steady state a synchronous Write or Read allocates
// nothing, on either side (the two engines share this process), on tcp and
// shm. BenchmarkWrite and BenchmarkRead report the same figure; this test
// keeps it from regressing unnoticed.
func TestOpAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		for _, kind := range []xfer.OpKind{xfer.OpWrite, xfer.OpRead} {
			t.Run(fmt.Sprintf("%s/%s", pol, kind), func(t *testing.T) {
				op := warmOp(t, pol, kind, 4096)
				// A few stray allocations of the runtime or the poller
				// may land in the window; a per-operation one would
				// show as 1 or more.
				if n := testing.AllocsPerRun(500, op); n >= 0.5 {
					t.Errorf("%v allocations per operation, want 0", n)
				}
			})
		}
	}
}

// BenchmarkCopy4K: Engine.Copy of a 4 KiB Go slice, which the engine must
// ask the CUDA driver about when one is loaded (the stand-in driver in
// these tests; XFER_NO_FAKE_CUDA=1: none), into registered host memory: a
// connector Put's copy into its pool.
func BenchmarkCopy4K(b *testing.B) {
	e, err := xfer.Open(context.Background(), xfer.Config{MemoryMB: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	buf, err := e.Alloc(4096)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Free(buf)
	src := make([]byte, 4096)
	b.SetBytes(4096)
	for b.Loop() {
		if err := e.Copy(buf.Bytes(), src); err != nil {
			b.Fatal(err)
		}
	}
}
