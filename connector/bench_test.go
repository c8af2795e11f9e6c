package connector

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// The benchmarks run over tcp and shm, and over rdma alone inside the RDMA
// VM (RDMA_VM set). -short leaves out the 256 MiB values, which is what a
// run under SoftRoCE needs. docs/CONNECTOR.md has the figures and the
// commands.

// benchPolicies returns the policies to benchmark and the RDMA device.
func benchPolicies(b *testing.B) ([]xfer.Policy, string) {
	if os.Getenv("RDMA_VM") != "" {
		return []xfer.Policy{xfer.PolicyRDMA}, testutil.RequireVerbs(b)
	}
	return []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM}, ""
}

// benchSizes are the value sizes of BenchmarkGet and BenchmarkPut.
func benchSizes() []int {
	sizes := []int{64 << 10, 1 << 20, 16 << 20, 256 << 20}
	if testing.Short() {
		sizes = sizes[:3]
	}
	return sizes
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchPair opens a producer and a consumer on policy whose pools hold a
// value of size bytes, the consumer pulling by pull.
func benchPair(b *testing.B, policy xfer.Policy, dev string, pull Pull, size int) (*Connector, *Connector) {
	b.Helper()
	mb := max(64, 2*size>>20+16)
	eng := xfer.Config{Transport: policy, MemoryMB: mb}
	eng.RDMA.Device = dev
	ctx := context.Background()
	pcfg := Config{Role: RoleProducer, Pull: pull, Engine: eng}
	pcfg.Engine.Listen = "127.0.0.1:0"
	p, err := Open(ctx, pcfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	c, err := Open(ctx, Config{Role: RoleConsumer, Pull: pull, Producer: p.Addr(), Engine: eng})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return p, c
}

// BenchmarkPutGet4K: a 4 KiB tensor put by the producer, then got by the
// consumer with the metadata Put returned, and released: the latency of a
// small value from one stage to the next, as p50, p99 and p99.9 in µs.
func BenchmarkPutGet4K(b *testing.B) {
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		b.Run(string(policy), func(b *testing.B) {
			p, c := benchPair(b, policy, dev, PullAuto, 4096)
			b.SetBytes(4096)
			b.ReportAllocs()
			putGet4K(b, p, c)
		})
	}
}

// BenchmarkPutGet4KThread is BenchmarkPutGet4K from a goroutine locked
// to its thread, as a call through the C ABI (the Python package) is:
// with no WaitSpin, and with ThreadWaitSpin, the C ABI's default.
func BenchmarkPutGet4KThread(b *testing.B) {
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		for _, spin := range []time.Duration{0, ThreadWaitSpin} {
			b.Run(fmt.Sprintf("%s/spin=%v", policy, spin), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				p, c := benchPair(b, policy, dev, PullAuto, 4096)
				c.spin = waitSpin(spin)
				putGet4K(b, p, c)
			})
		}
	}
}

// BenchmarkPutGet4KThreads is BenchmarkPutGet4KThread from 4 goroutines
// at once, each locked to its thread and putting and getting a key of its
// own: several callers of the C ABI. A Get spins only while no other
// waits, so the spin must not cost them (ns/op is per put+get).
func BenchmarkPutGet4KThreads(b *testing.B) {
	const callers = 4
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		for _, spin := range []time.Duration{0, ThreadWaitSpin} {
			b.Run(fmt.Sprintf("%s/spin=%v", policy, spin), func(b *testing.B) {
				p, c := benchPair(b, policy, dev, PullAuto, 4096)
				c.spin = waitSpin(spin)
				var wg sync.WaitGroup
				var mu sync.Mutex
				var lat []time.Duration
				b.ResetTimer()
				for w := range callers {
					wg.Go(func() {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						ctx := context.Background()
						t := Tensor{DType: F32, Shape: []int64{1024}, Data: make([]byte, 4096)}
						key := fmt.Sprint("k", w)
						mine := make([]time.Duration, 0, b.N/callers)
						for range b.N / callers {
							start := time.Now()
							_, meta, err := p.Put(ctx, "a", "b", key, t)
							if err != nil {
								b.Error(err)
								return
							}
							buf, _, err := c.Get(ctx, "a", "b", key, &meta)
							if err != nil {
								b.Error(err)
								return
							}
							buf.Release()
							mine = append(mine, time.Since(start))
						}
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
					})
				}
				wg.Wait()
				b.StopTimer()
				reportLatency(b, lat)
			})
		}
	}
}

// putGet4K is the loop of the PutGet4K benchmarks: each iteration puts a
// 4 KiB tensor, gets it and releases it, timed as one.
func putGet4K(b *testing.B, p, c *Connector) {
	ctx := context.Background()
	t := Tensor{DType: F32, Shape: []int64{1024}, Data: make([]byte, 4096)}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		_, meta, err := p.Put(ctx, "a", "b", "k", t)
		if err != nil {
			b.Fatal(err)
		}
		buf, _, err := c.Get(ctx, "a", "b", "k", &meta)
		if err != nil {
			b.Fatal(err)
		}
		buf.Release()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// reportLatency reports the median, the 99th and the 99.9th percentile of lat in µs.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(f float64) float64 {
		return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p999-µs")
}

// BenchmarkGet: a Get of a value the producer retains, by READ and by the
// producer's WRITE, and the Release of what it received. The sub-benchmarks
// alternate read and write at each size, so that a noisy machine affects
// both alike.
func BenchmarkGet(b *testing.B) {
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		b.Run(string(policy), func(b *testing.B) {
			for _, size := range benchSizes() {
				b.Run(sizeName(size), func(b *testing.B) {
					for _, pull := range []Pull{PullRead, PullWrite} {
						b.Run(pull.String(), func(b *testing.B) {
							benchGet(b, policy, dev, pull, size)
						})
					}
				})
			}
		})
	}
}

func benchGet(b *testing.B, policy xfer.Policy, dev string, pull Pull, size int) {
	p, c := benchPair(b, policy, dev, pull, size)
	ctx := context.Background()
	_, meta, err := p.Put(ctx, "a", "b", "k", make([]byte, size), Retain())
	if err != nil {
		b.Fatal(err)
	}
	get := func() {
		buf, _, err := c.Get(ctx, "a", "b", "k", &meta)
		if err != nil {
			b.Fatal(err)
		}
		buf.Release()
	}
	// One Get before the clock starts, so that the consumer's pool is
	// touched: the first use of fresh memory costs page faults, not Get.
	get()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		get()
	}
}

// BenchmarkPut: a Put that copies a value into the pool, against the
// zero-copy path, AllocBytes and PutBuffer, which publishes memory the
// producer filled in place (here: left as it was, since producing the
// value is the caller's work either way). A Put moves nothing over the
// transport; the policy decides the pool's backing (memfd for shm).
func BenchmarkPut(b *testing.B) {
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		b.Run(string(policy), func(b *testing.B) {
			for _, size := range benchSizes() {
				b.Run(sizeName(size), func(b *testing.B) {
					for _, mode := range []string{"copy", "zerocopy"} {
						b.Run(mode, func(b *testing.B) {
							benchPut(b, policy, dev, mode, size)
						})
					}
				})
			}
		})
	}
}

func benchPut(b *testing.B, policy xfer.Policy, dev string, mode string, size int) {
	p, _ := benchPair(b, policy, dev, PullAuto, size)
	ctx := context.Background()
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i)
	}
	for range 2 { // touch the memory the loop's Puts take turns in
		if _, _, err := p.Put(ctx, "a", "b", "k", v); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if mode == "copy" {
			_, _, err = p.Put(ctx, "a", "b", "k", v)
		} else {
			var buf *Buffer
			if buf, err = p.AllocBytes(ctx, int64(size)); err == nil {
				_, _, err = p.PutBuffer(ctx, "a", "b", "k", buf)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		// Each Put replaces the last, whose memory goes back to the pool.
	}
}

// BenchmarkPutGetTensor64M: a 64 MiB F32 tensor from Go memory, every page
// of it written (an untouched slice would be read from the kernel's zero
// page, faster than real data), put by the producer (a copy into the pool), then got by the consumer with the
// metadata Put returned, and released; both wait for pool memory. It is
// the Go side of the Python binding's benchmark (tools/bench/python.py),
// which does the same through python/xfer.
func BenchmarkPutGetTensor64M(b *testing.B) {
	const size = 64 << 20
	policies, dev := benchPolicies(b)
	for _, policy := range policies {
		b.Run(string(policy), func(b *testing.B) {
			eng := xfer.Config{Transport: policy, MemoryMB: 2*size>>20 + 16}
			eng.RDMA.Device = dev
			ctx := context.Background()
			pcfg := Config{Role: RoleProducer, WaitForMemory: true, Engine: eng}
			pcfg.Engine.Listen = "127.0.0.1:0"
			p, err := Open(ctx, pcfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			c, err := Open(ctx, Config{Role: RoleConsumer, WaitForMemory: true, Producer: p.Addr(), Engine: eng})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			t := Tensor{DType: F32, Shape: []int64{16, size / 16 / 4}, Data: make([]byte, size)}
			for i := range t.Data {
				t.Data[i] = byte(i)
			}
			b.SetBytes(size)
			i := 0
			for b.Loop() {
				key := fmt.Sprint("t", i)
				i++
				_, meta, err := p.Put(ctx, "a", "b", key, t)
				if err != nil {
					b.Fatal(err)
				}
				buf, _, err := c.Get(ctx, "a", "b", key, &meta)
				if err != nil {
					b.Fatal(err)
				}
				buf.Release()
			}
		})
	}
}
