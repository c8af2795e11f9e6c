package mem

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
)

// TestMain fails the test binary when a test leaks a goroutine or a file
// descriptor (a memfd among them). The tests of the table's cuda row run
// against the stand-in driver where the NVIDIA driver is missing.
func TestMain(m *testing.M) { testutil.RunWithCUDA(m) }

// skipIfNotSupported skips t when err says the platform lacks a feature,
// but only off Linux: there, ErrNotSupported is a regression.
func skipIfNotSupported(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNotSupported) && runtime.GOOS != "linux" {
		t.Skip(err)
	}
}

// newTestRegion maps a region for the duration of t.
func newTestRegion(t testing.TB, opts RegionOptions) *Region {
	t.Helper()
	r, err := NewRegion(opts)
	skipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// newTestPool makes a pool on a new private region of size bytes.
func newTestPool(t testing.TB, size int, opts PoolOptions) *Pool {
	t.Helper()
	p, err := NewPool(newTestRegion(t, RegionOptions{Size: size, HugePages: HugeOff}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// mustCheck fails t when the pool's invariants do not hold.
func mustCheck(t testing.TB, p *Pool) {
	t.Helper()
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
}

// check verifies the pool's invariants: the two free indexes hold the same
// blocks; free and allocated blocks are aligned, tile the managed span
// exactly, without gaps or overlaps; free blocks are never adjacent; the
// counters agree with the blocks.
func (p *Pool) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()

	type block struct {
		extent
		free bool
	}
	var blocks []block
	free := 0
	var err error
	p.byOff.Ascend(func(e extent) bool {
		if !p.bySize.Has(e) {
			err = fmt.Errorf("free block %+v missing from the size index", e)
			return false
		}
		blocks = append(blocks, block{e, true})
		free += e.size
		return true
	})
	if err != nil {
		return err
	}
	if p.byOff.Len() != p.bySize.Len() {
		return fmt.Errorf("indexes differ: %d blocks by offset, %d by size", p.byOff.Len(), p.bySize.Len())
	}
	if free != p.free {
		return fmt.Errorf("free counter %d, free blocks sum to %d", p.free, free)
	}
	for off, size := range p.used {
		blocks = append(blocks, block{extent{off, size}, false})
	}
	slices.SortFunc(blocks, func(a, b block) int { return a.off - b.off })

	at := p.start
	for i, b := range blocks {
		switch {
		case b.off != at:
			return fmt.Errorf("block %+v starts at %d, want %d (gap or overlap)", b, b.off, at)
		case b.size <= 0 || b.size%p.minAlign != 0:
			return fmt.Errorf("block %+v: size not a positive multiple of %d", b, p.minAlign)
		case (p.base+uintptr(b.off))%uintptr(p.minAlign) != 0:
			return fmt.Errorf("block %+v: address %#x not aligned to %d", b, p.base+uintptr(b.off), p.minAlign)
		case b.free && i > 0 && blocks[i-1].free:
			return fmt.Errorf("free blocks %+v and %+v are adjacent but not merged", blocks[i-1], b)
		}
		at += b.size
	}
	if at != p.end {
		return fmt.Errorf("blocks end at %d, want %d", at, p.end)
	}
	return nil
}
