package pages

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// BenchmarkFetchPage4K fetches random 4 KiB pages of a 64 MiB address space,
// one at a time, and reports the latency quantiles next to ns/op.
func BenchmarkFetchPage4K(b *testing.B) {
	for _, policy := range policies(b) {
		b.Run(string(policy), func(b *testing.B) {
			ctx := context.Background()
			const size = 64 << 20
			c, bufs, _ := newCluster(b, policy, size, 1, 1)
			buf := bufs[0].Bytes()
			rng := rand.New(rand.NewPCG(1, 2))
			for range 100 { // warm the connection
				c.FetchPage(ctx, 0, buf)
			}
			c.ResetLatency()
			b.ResetTimer()
			for b.Loop() {
				if err := c.FetchPage(ctx, rng.Uint64N(size/PageSize4K)*PageSize4K, buf); err != nil {
					b.Fatal(err)
				}
			}
			l := c.Latency()
			b.ReportMetric(float64(l.P50)/float64(time.Microsecond), "p50-µs")
			b.ReportMetric(float64(l.P99)/float64(time.Microsecond), "p99-µs")
			b.ReportMetric(float64(l.P999)/float64(time.Microsecond), "p99.9-µs")
		})
	}
}

// BenchmarkFetchPages4K fetches 32 random pages per submission.
func BenchmarkFetchPages4K(b *testing.B) {
	for _, policy := range policies(b) {
		b.Run(string(policy), func(b *testing.B) {
			ctx := context.Background()
			const size, depth = 64 << 20, 32
			c, bufs, _ := newCluster(b, policy, size, depth, 1)
			pb := make([][]byte, depth)
			for i := range pb {
				pb[i] = bufs[i].Bytes()
			}
			gpas := make([]uint64, depth)
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(depth * PageSize4K)
			for b.Loop() {
				for i := range gpas {
					gpas[i] = rng.Uint64N(size/PageSize4K) * PageSize4K
				}
				if err := c.FetchPages(ctx, gpas, pb); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*depth)/b.Elapsed().Seconds(), "pages/s")
		})
	}
}

// BenchmarkPipeline4K keeps 32 fetches of random 4 KiB pages in flight, in
// one pipeline per CPU on shm and two per CPU otherwise (as xfer pages
// bench --depth 32 does).
func BenchmarkPipeline4K(b *testing.B) {
	for _, policy := range policies(b) {
		b.Run(string(policy), func(b *testing.B) {
			ctx := context.Background()
			const size, depth = 64 << 20, 32
			c, bufs, _ := newCluster(b, policy, size, depth, 1)
			perCPU := 2
			if policy == xfer.PolicySHM {
				perCPU = 1
			}
			workers := min(depth, perCPU*runtime.GOMAXPROCS(0))
			var next atomic.Int64
			b.SetBytes(PageSize4K)
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(1, uint64(w)))
					p, err := c.NewPipeline(depth / workers)
					if err != nil {
						b.Error(err)
						return
					}
					page := func() uint64 { return rng.Uint64N(size/PageSize4K) * PageSize4K }
					for i := range depth / workers {
						if next.Add(1) > int64(b.N) {
							break
						}
						if err := p.Start(page(), bufs[w*depth/workers+i].Bytes()); err != nil {
							b.Error(err)
							return
						}
					}
					for p.InFlight() > 0 {
						_, buf, err := p.Next(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if next.Add(1) <= int64(b.N) {
							if err := p.Start(page(), buf); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
		})
	}
}
