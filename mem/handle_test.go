package mem

import (
	"sync/atomic"
	"testing"
	"time"
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
