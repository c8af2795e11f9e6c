package mem

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
)

// TestHandleDescribes: a handle states the region's number, key, rights,
// memory, base, length and memfd, and where a slice of it starts.
func TestHandleDescribes(t *testing.T) {
	for _, shared := range []bool{false, true} {
		r, err := NewRegion(RegionOptions{Size: 1 << 16, Shared: shared, Name: "handle-test"})
		if err != nil {
			t.Fatal(err)
		}
		h := NewHandle(r, 7, 0xfeed, AccessWrite)
		switch {
		case h.ID() != 7 || h.Key() != 0xfeed || h.Access() != AccessWrite:
			t.Errorf("shared %v: id %d key %#x access %s, want 7, 0xfeed, write", shared, h.ID(), h.Key(), h.Access())
		case h.Base() != uint64(r.Addr()) || h.Len() != uint64(r.Len()) || len(h.Bytes()) != r.Len() || &h.Bytes()[0] != &r.Bytes()[0]:
			t.Errorf("shared %v: handle's memory [%#x, +%d) is not the region's [%#x, +%d)", shared, h.Base(), h.Len(), r.Addr(), r.Len())
		case h.FD() != r.FD():
			t.Errorf("shared %v: fd %d, the region's is %d", shared, h.FD(), r.FD())
		case shared == (h.FD() < 0):
			t.Errorf("shared %v: fd %d", shared, h.FD())
		case h.Offset(r.Bytes()[4096:8192]) != 4096 || h.Offset(r.Bytes()) != 0:
			t.Errorf("shared %v: offsets %d and %d, want 4096 and 0", shared, h.Offset(r.Bytes()[4096:8192]), h.Offset(r.Bytes()))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandleReadOnlyFD: a handle that grants peers no write carries a
// descriptor of the memfd opened read-only, which the kernel lets no one
// map writable; the region closes it (the test binary fails on a leaked
// descriptor).
func TestHandleReadOnlyFD(t *testing.T) {
	r, err := NewRegion(RegionOptions{Size: 1 << 16, Shared: true, Name: "handle-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ro := NewHandle(r, 1, 1, AccessRead)
	ro2 := NewHandle(r, 2, 2, 0)
	if ro.FD() < 0 || ro.FD() == r.FD() || ro2.FD() != ro.FD() {
		t.Fatalf("read-only handles' fds %d and %d, the region's %d: want one other descriptor", ro.FD(), ro2.FD(), r.FD())
	}
	if m, err := sys.MmapShared(ro.FD(), 1<<16); err == nil {
		sys.Munmap(m)
		t.Fatal("the read-only handle's descriptor maps writable")
	}
	m, err := sys.MmapSharedReadOnly(ro.FD(), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	r.Bytes()[100] = 42
	if m[100] != 42 {
		t.Error("the read-only mapping does not show the region's memory")
	}
	// The memfd is sealed: not even the region's own descriptor maps
	// writable any more, while its mapping, made before, still writes.
	if m, err := sys.MmapShared(r.FD(), 1<<16); err == nil {
		sys.Munmap(m)
		t.Error("the region's own descriptor maps writable after a read-only handle was made")
	}
	sys.Munmap(m)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.ReadOnlyFD() != -1 {
		t.Error("a closed region still has a read-only descriptor")
	}
}

// TestHandlePins: pins taken before Retire hold Drain until they are
// released; none can be taken after it.
func TestHandlePins(t *testing.T) {
	var h Handle
	if !h.Pin() || !h.Pin() {
		t.Fatal("a live handle refused a pin")
	}
	if h.Pins() != 2 {
		t.Fatalf("%d pins, want 2", h.Pins())
	}
	h.Retire()
	if !h.Retired() {
		t.Fatal("Retired is false after Retire")
	}
	if h.Pin() {
		t.Fatal("a retired handle was pinned")
	}
	if h.Pins() != 2 {
		t.Fatalf("%d pins after a refused pin, want 2", h.Pins())
	}
	var drained atomic.Bool
	done := make(chan struct{})
	go func() {
		h.Drain()
		drained.Store(true)
		close(done)
	}()
	h.Unpin()
	time.Sleep(10 * time.Millisecond)
	if drained.Load() {
		t.Fatal("Drain returned while a pin was held")
	}
	h.Unpin()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return once the pins were released")
	}
}
