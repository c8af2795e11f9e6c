package master

import "testing"

// TestAllocatorBestFitAndCoalescing hands out places, frees some to leave
// holes, checks that a request takes the smallest hole that fits, and
// that freed neighbours merge back into one extent.
func TestAllocatorBestFitAndCoalescing(t *testing.T) {
	a := newAllocator(0x1000, 16*placeAlign)
	if a == nil || a.capacity() != 16*placeAlign {
		t.Fatalf("allocator over 16 lines: %+v", a)
	}
	var addrs []uint64
	for range 8 {
		addr, size, ok := a.alloc(2 * placeAlign)
		if !ok || size != 2*placeAlign {
			t.Fatalf("alloc: %v %d", ok, size)
		}
		addrs = append(addrs, addr)
	}
	if _, _, ok := a.alloc(1); ok {
		t.Fatal("a full allocator handed out a place")
	}
	// Holes of 2 lines (addrs[1]) and 4 lines (addrs[4], addrs[5]).
	for _, i := range []int{1, 4, 5} {
		if !a.free(addrs[i]) {
			t.Fatalf("free %#x refused", addrs[i])
		}
	}
	if a.free(addrs[1]) {
		t.Fatal("a double free was accepted")
	}
	if a.free(addrs[0] + 1) {
		t.Fatal("a free of an address inside a place was accepted")
	}
	if got := a.largestFree(); got != 4*placeAlign {
		t.Fatalf("largest free extent %d, want the merged 4 lines", got)
	}
	addr, _, ok := a.alloc(placeAlign + 1) // 2 lines: best fit is the 2-line hole
	if !ok || addr != addrs[1] {
		t.Fatalf("best fit: got %#x %v, want the 2-line hole at %#x", addr, ok, addrs[1])
	}
	addr, _, ok = a.alloc(3 * placeAlign)
	if !ok || addr != addrs[4] {
		t.Fatalf("3 lines: got %#x %v, want the merged hole at %#x", addr, ok, addrs[4])
	}
	for _, x := range []uint64{addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[6], addrs[7]} {
		if !a.free(x) {
			t.Fatalf("free %#x refused", x)
		}
	}
	if a.inUse != 0 || a.byAddr.Len() != 1 || a.largestFree() != a.capacity() {
		t.Fatalf("after freeing everything: in use %d, %d extents, largest %d", a.inUse, a.byAddr.Len(), a.largestFree())
	}
}

// TestAllocatorAlignment mounts ranges that do not start or end on a line
// and checks that every place starts on one and that the span shrinks to
// the aligned part.
func TestAllocatorAlignment(t *testing.T) {
	a := newAllocator(0x1001, 4*placeAlign)
	if a == nil || a.start != 0x1040 || a.end != 0x1100 || a.capacity() != 3*placeAlign {
		t.Fatalf("unaligned range: %+v", a)
	}
	for range 3 {
		addr, size, ok := a.alloc(1)
		if !ok || addr%placeAlign != 0 || size != placeAlign {
			t.Fatalf("alloc(1): %#x %d %v", addr, size, ok)
		}
	}
	if _, _, ok := a.alloc(1); ok {
		t.Fatal("alloc past the aligned span")
	}
	for _, r := range []struct{ base, size uint64 }{
		{0x1001, 10},             // no whole line
		{0, 0},                   // empty
		{^uint64(0) - 100, 1000}, // overflows
		{^uint64(0) &^ 63, 64},   // ends past the top
	} {
		if a := newAllocator(r.base, r.size); a != nil {
			t.Errorf("newAllocator(%#x, %d) = %+v, want nil", r.base, r.size, a)
		}
	}
	b := newAllocator(0, 1<<20)
	if _, _, ok := b.alloc(^uint64(0)); ok {
		t.Fatal("alloc of 2^64-1 bytes succeeded")
	}
	if _, _, ok := b.alloc(0); ok {
		t.Fatal("alloc of 0 bytes succeeded")
	}
}

// TestAllocatorTake rebuilds an allocator from places another one handed
// out: take accepts each, refuses overlaps and misaligned ones, and alloc
// never hands a taken place out again.
func TestAllocatorTake(t *testing.T) {
	src := newAllocator(0x1000, 32*placeAlign)
	type pl struct{ addr, size uint64 }
	var places []pl
	for _, n := range []uint64{1, 100, 64, 3 * placeAlign, 7} {
		addr, size, ok := src.alloc(n)
		if !ok {
			t.Fatal("alloc")
		}
		places = append(places, pl{addr, size})
	}
	src.free(places[1].addr) // a hole between taken places
	places = append(places[:1], places[2:]...)

	a := newAllocator(0x1000, 32*placeAlign)
	for _, p := range places {
		if !a.take(p.addr, p.size) {
			t.Fatalf("take %#x+%d refused", p.addr, p.size)
		}
	}
	if a.inUse != src.inUse {
		t.Fatalf("in use %d, want %d", a.inUse, src.inUse)
	}
	for _, bad := range []pl{
		{places[0].addr, placeAlign},                    // taken already
		{places[0].addr + placeAlign/2, placeAlign},     // misaligned
		{places[2].addr - placeAlign, 2 * placeAlign},   // overlaps a taken one
		{0x1000 + 32*placeAlign, placeAlign},            // past the end
		{0x1000 + 31*placeAlign, 2 * placeAlign},        // runs past the end
		{places[0].addr + 2*placeAlign, placeAlign + 1}, // not a multiple of the alignment
	} {
		if a.take(bad.addr, bad.size) {
			t.Errorf("take %#x+%d accepted", bad.addr, bad.size)
		}
	}
	// Every further place lies outside the taken ones.
	for {
		addr, size, ok := a.alloc(1)
		if !ok {
			break
		}
		for _, p := range places {
			if addr < p.addr+p.size && p.addr < addr+size {
				t.Fatalf("alloc handed out %#x+%d, inside taken %#x+%d", addr, size, p.addr, p.size)
			}
		}
	}
	if a.inUse != a.capacity() {
		t.Fatalf("in use %d of %d after allocating everything", a.inUse, a.capacity())
	}
}
