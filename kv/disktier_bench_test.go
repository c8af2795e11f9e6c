package kv

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// BenchmarkDiskTierGet: GETs of values only on disk, one client over tcp
// and shm, 1 MiB and 4 KiB values: keys read in turn, each evicted (and
// written to disk) long before its turn comes again, so that every GET
// reads its value from disk into the pool and then WRITEs it to the
// client. The tier's file is in XFER_BENCH_DISK_DIR (default: the test's
// temporary directory), so that tools/bench/kvdisk.py can run fio on the
// same file system. It reports p50-ns and p99-ns besides ns/op.
//
// BenchmarkDiskTierGet/memory is the same server's GET of one value in
// memory: against BenchmarkGet's, the cost of having a disk tier at all.
func BenchmarkDiskTierGet(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{1 << 20, 4 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", tr, size), func(b *testing.B) { benchDiskGet(b, tr, size, false) })
		}
		b.Run(fmt.Sprintf("%s/memory/%dB", tr, 1<<20), func(b *testing.B) { benchDiskGet(b, tr, 1<<20, true) })
	}
}

func benchDiskGet(b *testing.B, tr xfer.Policy, size int, memory bool) {
	dir := b.TempDir()
	if d := os.Getenv("XFER_BENCH_DISK_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "kvdisk"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	pool := 64
	if size < 64<<10 {
		pool = 8
	}
	// 4 pool's worth of values, so that each is on disk at its turn.
	keys := 4 * (pool << 20) / size
	if memory {
		keys = 1
	}
	s := startServer(b, ServerOptions{Engine: xfer.Config{MemoryMB: pool}, DiskDir: dir, DiskSize: 1 << 30, LeaseTTL: -1})
	c := dialOpts(b, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: 16}})
	ctx := ctxT(b)
	buf, err := c.Engine().Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Engine().Free(buf)
	for i := range keys {
		copy(buf.Bytes(), selfChecking(uint64(i), 1, size))
		if err := c.PutBuffer(ctx, fmt.Sprint(i), buf, size); err != nil {
			b.Fatal(err)
		}
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	// Let the write-behind finish: the GETs then measure reads only.
	for deadline := time.Now().Add(30 * time.Second); s.Snapshot().Disk.Queue > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	before := s.Snapshot().Disk.Hits
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := c.GetInto(ctx, names[i%keys], buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	if hits := s.Snapshot().Disk.Hits - before; !memory && b.N >= keys && hits < uint64(b.N)*9/10 {
		b.Fatalf("%d of %d GETs read from disk: the benchmark measures memory", hits, b.N)
	}
}
