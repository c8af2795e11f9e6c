package mem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func mustAlloc(t testing.TB, p *Pool, size int) Buffer {
	t.Helper()
	b, err := p.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustFree(t testing.TB, p *Pool, b Buffer) {
	t.Helper()
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
}

func TestAllocFree(t *testing.T) {
	p := newTestPool(t, 1<<20, PoolOptions{})
	if s := p.Stats(); s.Capacity != 1<<20 || s.Free != 1<<20 || s.FreeBlocks != 1 {
		t.Fatalf("new pool: %+v", s)
	}
	a := mustAlloc(t, p, 100)
	b := mustAlloc(t, p, 5000)
	mustCheck(t, p)

	if a.IsZero() || a.Len() != 100 || a.Pool() != p || a.Region() != p.Region() {
		t.Fatalf("Buffer %+v: wrong accessors", a)
	}
	ab, bb := a.Bytes(), b.Bytes()
	if len(ab) != 100 || cap(ab) != 100 || len(bb) != 5000 || cap(bb) != 5000 {
		t.Fatalf("len/cap %d/%d and %d/%d", len(ab), cap(ab), len(bb), cap(bb))
	}
	if off, ok := p.Region().Contains(bb); !ok || off != b.Offset() {
		t.Fatalf("region.Contains(b) = %d, %v; want %d, true", off, ok, b.Offset())
	}
	for i := range bb {
		bb[i] = 0xb
	}
	for i := range ab {
		ab[i] = 0xa
	}
	for i, c := range bb {
		if c != 0xb {
			t.Fatalf("b[%d] = %#x: a and b overlap", i, c)
		}
	}
	s := p.Stats()
	if s.InUse != 128+5056 || s.Allocated != 2 || s.Allocs != 2 {
		t.Fatalf("stats after 2 allocs: %+v", s)
	}

	mustFree(t, p, a)
	mustFree(t, p, b)
	mustCheck(t, p)
	s = p.Stats()
	if s.InUse != 0 || s.Free != s.Capacity || s.FreeBlocks != 1 || s.Allocated != 0 || s.Frees != 2 || s.Fragmentation != 0 {
		t.Fatalf("stats after freeing all: %+v", s)
	}
}

func TestAllocBadArgs(t *testing.T) {
	p := newTestPool(t, 4096, PoolOptions{})
	for _, size := range []int{0, -1} {
		if _, err := p.Alloc(size); err == nil {
			t.Errorf("Alloc(%d) succeeded", size)
		}
		if _, err := p.AllocWait(context.Background(), size); err == nil {
			t.Errorf("AllocWait(%d) succeeded", size)
		}
	}
	tooBig := MaxAlign
	tooBig *= 2 // wraps to a negative value where int has 32 bits
	for _, align := range []int{0, -64, 3, 96, tooBig} {
		if _, err := p.AllocAligned(64, align); err == nil {
			t.Errorf("AllocAligned(64, %d) succeeded", align)
		}
	}
	if s := p.Stats(); s.Allocs != 0 || s.Failures != 0 || s.InUse != 0 {
		t.Fatalf("bad arguments changed the pool: %+v", s)
	}
}

func TestNewPoolBadArgs(t *testing.T) {
	if _, err := NewPool(nil, PoolOptions{}); err == nil {
		t.Error("NewPool(nil) succeeded")
	}
	r := newTestRegion(t, RegionOptions{Size: 4096})
	tooBig := MaxAlign
	tooBig *= 2
	for _, a := range []int{-1, 3, 100, tooBig} {
		if _, err := NewPool(r, PoolOptions{MinAlign: a}); err == nil {
			t.Errorf("NewPool with MinAlign %d succeeded", a)
		}
	}
	// A region smaller than MinAlign holds no aligned block.
	if _, err := NewPool(r, PoolOptions{MinAlign: 8192}); err == nil {
		t.Error("NewPool with MinAlign above the region size succeeded")
	}
	closed, err := NewRegion(RegionOptions{Size: 4096})
	skipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if _, err := NewPool(closed, PoolOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("NewPool(closed region) = %v, want ErrClosed", err)
	}
}

// TestPoolSkewedRegion puts a pool on memory whose base is not aligned to
// MinAlign: the pool must trim the ends and still align addresses.
func TestPoolSkewedRegion(t *testing.T) {
	r := newTestRegion(t, RegionOptions{Size: 64 << 10})
	w, err := WrapRegion(r.Bytes()[100 : 100+10000])
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(w, PoolOptions{MinAlign: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mustCheck(t, p)
	// 100 bytes in, the next 256-aligned address is 256-100 = 156 bytes
	// further; 9844 bytes remain, of which 38*256 = 9728 are whole units.
	if s := p.Stats(); s.Capacity != 9728 {
		t.Fatalf("capacity %d, want 9728", s.Capacity)
	}
	b := mustAlloc(t, p, 1)
	if b.Offset() != 156 || addr(b.Bytes())%256 != 0 {
		t.Fatalf("first block at offset %d, address %#x", b.Offset(), addr(b.Bytes()))
	}
}

func TestAlignment(t *testing.T) {
	r := newTestRegion(t, RegionOptions{Size: 16 << 20, HugePages: HugeOff})
	// Skew the base so that aligned offsets are not aligned addresses.
	w, err := WrapRegion(r.Bytes()[192:])
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(w, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	for align := 1; align <= 4<<20; align *= 2 {
		var fillers []Buffer
		for _, size := range []int{1, 63, 64, 100, 4096, 65537} {
			// An odd-sized block first, so the aligned one cannot simply
			// start where the last one ended.
			fillers = append(fillers, mustAlloc(t, p, 40))
			b, err := p.AllocAligned(size, align)
			if err != nil {
				t.Fatalf("AllocAligned(%d, %d): %v", size, align, err)
			}
			want := max(align, DefaultMinAlign)
			if a := addr(b.Bytes()); a%uintptr(want) != 0 {
				t.Fatalf("AllocAligned(%d, %d): address %#x not aligned to %d", size, align, a, want)
			}
			if a := w.Addr() + uintptr(b.Offset()); a != addr(b.Bytes()) {
				t.Fatalf("AllocAligned(%d, %d): Offset %d does not match address %#x", size, align, b.Offset(), addr(b.Bytes()))
			}
			if len(b.Bytes()) != size {
				t.Fatalf("AllocAligned(%d, %d): len %d", size, align, len(b.Bytes()))
			}
			mustCheck(t, p)
			mustFree(t, p, b)
		}
		for _, b := range fillers {
			mustFree(t, p, b)
		}
		mustCheck(t, p)
	}
	if s := p.Stats(); s.FreeBlocks != 1 || s.InUse != 0 {
		t.Fatalf("after freeing all: %+v", s)
	}
	// Up to MaxAlign is a valid request; this pool cannot satisfy it.
	if _, err := p.AllocAligned(64, MaxAlign); err != nil && !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("AllocAligned(64, MaxAlign) = %v", err)
	}
}

func TestExhaustion(t *testing.T) {
	p := newTestPool(t, 4<<20, PoolOptions{})
	const block = 512 << 10
	var bufs []Buffer
	for range 8 {
		bufs = append(bufs, mustAlloc(t, p, block))
	}
	if _, err := p.Alloc(1); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("Alloc on a full pool = %v, want ErrPoolExhausted", err)
	}
	// Free two blocks that are not neighbours: 1 MiB free, in 512 KiB
	// pieces.
	mustFree(t, p, bufs[0])
	mustFree(t, p, bufs[2])
	mustCheck(t, p)

	_, err := p.Alloc(4 << 20)
	const want = "pool exhausted: need 4194304 bytes, 1048576 free, largest free block 524288"
	if !errors.Is(err, ErrPoolExhausted) || err.Error() != want {
		t.Fatalf("Alloc(4 MiB) = %v, want %q", err, want)
	}
	_, err = p.Alloc(1 << 20)
	if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "largest free block 524288") {
		t.Fatalf("Alloc(1 MiB) with 1 MiB in two pieces = %v", err)
	}
	// Only the first address of a hole can hold 512 KiB. Ask for an
	// alignment that neither hole's address has.
	lowbit := func(a uintptr) uintptr { return a & -a }
	align := int(2 * max(lowbit(addr(bufs[0].Bytes())), lowbit(addr(bufs[2].Bytes()))))
	if align <= MaxAlign {
		_, err = p.AllocAligned(block, align)
		if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), fmt.Sprint("aligned to ", align)) {
			t.Fatalf("AllocAligned(512 KiB, %d) = %v", align, err)
		}
	} else {
		p.failures++ // the holes are 1 GiB aligned; keep the count below
	}
	_, err = p.Alloc(5 << 20)
	if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("Alloc beyond capacity = %v", err)
	}
	s := p.Stats()
	if s.Failures != 5 || s.Free != 1<<20 || s.LargestFree != block || s.FreeBlocks != 2 || s.Fragmentation != 0.5 {
		t.Fatalf("stats of a fragmented pool: %+v", s)
	}
	mustCheck(t, p)

	// Recovery: freeing the block between the holes merges all three.
	mustFree(t, p, bufs[1])
	if s := p.Stats(); s.LargestFree != 3*block || s.FreeBlocks != 1 || s.Fragmentation != 0 {
		t.Fatalf("stats after merging: %+v", s)
	}
	b := mustAlloc(t, p, 1<<20)
	mustFree(t, p, b)
	for _, b := range bufs[3:] {
		mustFree(t, p, b)
	}
	b = mustAlloc(t, p, 4<<20)
	mustFree(t, p, b)
	mustCheck(t, p)
}

func TestMerge(t *testing.T) {
	p := newTestPool(t, 4096, PoolOptions{})
	a, b, c := mustAlloc(t, p, 1024), mustAlloc(t, p, 1024), mustAlloc(t, p, 2048)
	if s := p.Stats(); s.Free != 0 || s.FreeBlocks != 0 {
		t.Fatalf("full pool: %+v", s)
	}
	mustFree(t, p, a)
	mustFree(t, p, c)
	mustCheck(t, p)
	if s := p.Stats(); s.FreeBlocks != 2 || s.LargestFree != 2048 || s.Free != 3072 {
		t.Fatalf("after freeing A and C: %+v", s)
	}
	mustFree(t, p, b)
	mustCheck(t, p)
	if s := p.Stats(); s.FreeBlocks != 1 || s.LargestFree != 4096 {
		t.Fatalf("after freeing B: %+v, want one block of 4096", s)
	}
}

func TestDoubleFree(t *testing.T) {
	p := newTestPool(t, 64<<10, PoolOptions{})
	a := mustAlloc(t, p, 1000)
	b := mustAlloc(t, p, 1000)
	mustFree(t, p, a)
	before := p.Stats()
	if err := p.Free(a); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second Free = %v, want ErrDoubleFree", err)
	}
	if after := p.Stats(); after != before {
		t.Fatalf("double free changed the stats: %+v to %+v", before, after)
	}
	mustCheck(t, p)

	// A's memory handed out again at another size: the stale copy now
	// overlaps a live block.
	a2 := mustAlloc(t, p, 64)
	if a2.Offset() != a.Offset() {
		t.Fatalf("best fit did not reuse A's hole: offset %d, want %d", a2.Offset(), a.Offset())
	}
	if err := p.Free(a); !errors.Is(err, ErrOverlap) {
		t.Fatalf("Free(stale A) = %v, want ErrOverlap", err)
	}
	mustCheck(t, p)
	mustFree(t, p, a2)
	mustFree(t, p, b)
	mustCheck(t, p)
}

func TestBadFree(t *testing.T) {
	p := newTestPool(t, 64<<10, PoolOptions{})
	other := newTestPool(t, 4096, PoolOptions{})
	a := mustAlloc(t, p, 4096)
	b := mustAlloc(t, p, 4096)
	foreign := mustAlloc(t, other, 64)
	end := int(p.Stats().Capacity)

	for _, tc := range []struct {
		name string
		buf  Buffer
		want error
	}{
		{"inside A", Buffer{p, a.off + 64, 64}, ErrOverlap},
		{"head of A", Buffer{p, a.off, 64}, ErrOverlap},
		{"A and B", Buffer{p, a.off, 8192}, ErrOverlap},
		{"tail of B into free", Buffer{p, b.off + 2048, 4096}, ErrOverlap},
		{"free memory", Buffer{p, 3 * 4096, 4096}, ErrDoubleFree},
		{"free and beyond the end", Buffer{p, end - 64, 128}, ErrNotAllocated},
		{"beyond the end", Buffer{p, end + 4096, 64}, ErrNotAllocated},
		{"negative offset", Buffer{p, -64, 64}, ErrNotAllocated},
		{"zero length", Buffer{p, a.off, 0}, ErrNotAllocated},
		{"huge length", Buffer{p, a.off, int(^uint(0) >> 1)}, ErrOverlap},
		{"zero Buffer", Buffer{}, ErrNotAllocated},
		{"other pool", foreign, ErrForeignBuffer},
	} {
		before := p.Stats()
		if err := p.Free(tc.buf); !errors.Is(err, tc.want) {
			t.Errorf("%s: Free = %v, want %v", tc.name, err, tc.want)
		}
		if after := p.Stats(); after != before {
			t.Errorf("%s: Free changed the stats from %+v to %+v", tc.name, before, after)
		}
		mustCheck(t, p)
	}
	mustFree(t, p, a)
	mustFree(t, p, b)
	mustFree(t, other, foreign)
}

func TestPoolClose(t *testing.T) {
	p := newTestPool(t, 64<<10, PoolOptions{})
	b := mustAlloc(t, p, 100)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := p.Alloc(100); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close = %v, want ErrClosed", err)
	}
	if _, err := p.AllocWait(context.Background(), 100); !errors.Is(err, ErrClosed) {
		t.Fatalf("AllocWait after Close = %v, want ErrClosed", err)
	}
	if len(b.Bytes()) != 100 {
		t.Fatal("Buffer unusable after Pool.Close")
	}
	mustFree(t, p, b)
	mustCheck(t, p)
	var nilPool *Pool
	if err := nilPool.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBufferAfterRegionClose(t *testing.T) {
	r, err := NewRegion(RegionOptions{Size: 4096})
	skipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(r, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, p, 64)
	p.Close()
	r.Close()
	if b.Bytes() != nil {
		t.Fatal("Buffer.Bytes after Region.Close is not nil")
	}
	var zero Buffer
	if !zero.IsZero() || zero.Bytes() != nil || zero.Region() != nil || zero.Pool() != nil {
		t.Fatal("zero Buffer is not empty")
	}
}

// fullPool returns a pool with all its memory in one Buffer.
func fullPool(t *testing.T) (*Pool, Buffer) {
	p := newTestPool(t, 64<<10, PoolOptions{})
	return p, mustAlloc(t, p, 64<<10)
}

func TestAllocWaitWakes(t *testing.T) {
	p, all := fullPool(t)
	type result struct {
		b   Buffer
		err error
	}
	done := make(chan result)
	for range 4 {
		go func() {
			b, err := p.AllocWait(context.Background(), 4096)
			done <- result{b, err}
		}()
	}
	select {
	case r := <-done:
		t.Fatalf("AllocWait returned %v on a full pool", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	mustFree(t, p, all)
	for range 4 {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if len(r.b.Bytes()) != 4096 {
			t.Fatalf("AllocWait returned %d bytes", len(r.b.Bytes()))
		}
		mustFree(t, p, r.b)
	}
	mustCheck(t, p)
}

func TestAllocWaitContext(t *testing.T) {
	p, all := fullPool(t)
	goroutines := runtime.NumGoroutine()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.AllocWait(ctx, 64); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllocWait past its deadline = %v, want DeadlineExceeded", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := p.AllocWait(ctx, 64)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("AllocWait after cancel = %v, want Canceled", err)
	}
	if s := p.Stats(); s.Failures != 2 {
		t.Fatalf("Failures = %d, want 2", s.Failures)
	}

	// Requests that can never fit fail at once.
	if _, err := p.AllocWait(context.Background(), 64<<10+1); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("AllocWait beyond capacity = %v, want ErrPoolExhausted", err)
	}
	// Close wakes waiters.
	go func() {
		_, err := p.AllocWait(context.Background(), 64)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	p.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("AllocWait across Close = %v, want ErrClosed", err)
	}
	mustFree(t, p, all)

	// AllocWait starts no goroutines of its own.
	for i := 0; runtime.NumGoroutine() > goroutines; i++ {
		if i == 100 {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), goroutines)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrent hammers one pool from many goroutines. Each fills its
// buffers with a pattern and checks it before Free, so overlapping blocks
// would show up as corrupted patterns (and as races under -race).
func TestConcurrent(t *testing.T) {
	p := newTestPool(t, 4<<20, PoolOptions{})
	const goroutines, ops = 8, 2000
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var live []Buffer
			free := func(i int) error {
				b := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				want := byte(b.Offset()>>6) ^ byte(g)
				for j, c := range b.Bytes() {
					if c != want {
						return fmt.Errorf("goroutine %d: block at %d byte %d = %#x, want %#x", g, b.Offset(), j, c, want)
					}
				}
				return p.Free(b)
			}
			for range ops {
				if len(live) > 0 && rng.IntN(2) == 0 {
					if err := free(rng.IntN(len(live))); err != nil {
						errc <- err
						return
					}
					continue
				}
				var b Buffer
				var err error
				if size := 1 + rng.IntN(32<<10); rng.IntN(4) == 0 {
					b, err = p.AllocAligned(size, 1<<rng.IntN(16))
				} else {
					b, err = p.Alloc(size)
				}
				if errors.Is(err, ErrPoolExhausted) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				want := byte(b.Offset()>>6) ^ byte(g)
				buf := b.Bytes()
				for j := range buf {
					buf[j] = want
				}
				live = append(live, b)
			}
			for len(live) > 0 {
				if err := free(0); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	mustCheck(t, p)
	if s := p.Stats(); s.InUse != 0 || s.FreeBlocks != 1 || s.Allocs != s.Frees {
		t.Fatalf("after all goroutines freed everything: %+v", s)
	}
}

func BenchmarkAllocFree(b *testing.B) {
	p := newTestPool(b, 64<<20, PoolOptions{})
	// A few thousand live blocks, so the indexes are not trivially small.
	rng := rand.New(rand.NewPCG(1, 2))
	var live []Buffer
	for range 4000 {
		buf, err := p.Alloc(1 + rng.IntN(8192))
		if err != nil {
			b.Fatal(err)
		}
		live = append(live, buf)
	}
	for i := 0; i < len(live); i += 2 {
		mustFree(b, p, live[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, err := p.Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocFreeParallel(b *testing.B) {
	p := newTestPool(b, 64<<20, PoolOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf, err := p.Alloc(4096)
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.Free(buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A held range is not handed out again while held, even after its Buffer
// was freed; once released, its block is free again. Frees of blocks no
// hold covers work as usual meanwhile, and double frees are still caught.
func TestPoolHold(t *testing.T) {
	r, err := NewRegion(RegionOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := NewPool(r, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, err := p.Alloc(512 << 10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	release, ok := p.Hold(a.Bytes()[4096:8192])
	if !ok {
		t.Fatal("Hold of the pool's own bytes: not ok")
	}
	if _, ok := p.Hold(make([]byte, 10)); ok {
		t.Fatal("Hold of heap bytes: ok")
	}
	if err := p.Free(a); err != nil {
		t.Fatalf("free of a held block: %v", err)
	}
	if err := p.Free(a); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second free of a held block: %v, want ErrDoubleFree", err)
	}
	if err := p.Free(b); err != nil { // not held: free at once
		t.Fatal(err)
	}
	// Nothing may come from a's bytes while they are held.
	var got []Buffer
	for {
		c, err := p.Alloc(64 << 10)
		if err != nil {
			break
		}
		got = append(got, c)
		lo, hi := addrOf(c.Bytes()), addrOf(c.Bytes())+uintptr(c.Len())
		if alo := addrOf(a.Bytes()); lo < alo+uintptr(a.Len()) && alo < hi {
			t.Fatalf("a held block was handed out again: [%#x, %#x)", lo, hi)
		}
	}
	if len(got) == 0 {
		t.Fatal("the free block b left could not be allocated")
	}
	for _, c := range got {
		if err := p.Free(c); err != nil {
			t.Fatal(err)
		}
	}
	release()
	release() // idempotent
	if s := p.Stats(); s.InUse != 0 || s.Allocated != 0 {
		t.Fatalf("after the release: %d bytes in %d blocks in use, want none", s.InUse, s.Allocated)
	}
	if c, err := p.Alloc(1<<20 - 4096); err != nil {
		t.Fatalf("the whole pool after the release: %v", err)
	} else {
		p.Free(c)
	}
}
