package master

import (
	"math"

	"github.com/google/btree"
)

// placeAlign is the alignment of every place the master hands out, and
// the unit its sizes are rounded up to: one cache line.
const placeAlign = 64

// btreeDegree sets the fan-out of the free extent indexes.
const btreeDegree = 32

// extent is a range of a segment: size bytes at address addr.
type extent struct{ addr, size uint64 }

func byAddr(a, b extent) bool { return a.addr < b.addr }

func bySizeAddr(a, b extent) bool {
	return a.size < b.size || a.size == b.size && a.addr < b.addr
}

// allocator hands out places in one segment, [base, base+size) of its
// owner's memory, as mem.Pool does in a region: best fit over the free
// extents, indexed by address (to merge neighbours on free) and by (size,
// address) (to find the smallest that fits). Every place starts at an
// address aligned to placeAlign and its size is a multiple of it. The
// allocator never touches the memory: the addresses are the owner's.
//
// It is not safe for concurrent use: the Service's mutex guards it.
type allocator struct {
	start, end uint64 // the aligned span managed
	byAddr     *btree.BTreeG[extent]
	bySize     *btree.BTreeG[extent]
	used       map[uint64]uint64 // allocated places: address to rounded size
	inUse      uint64
}

// alignUp rounds n up to placeAlign; ok is false on overflow.
func alignUp(n uint64) (uint64, bool) {
	if n > math.MaxUint64-(placeAlign-1) {
		return 0, false
	}
	return (n + placeAlign - 1) &^ (placeAlign - 1), true
}

// newAllocator manages the largest placeAlign-aligned span of [base,
// base+size); nil when there is none (or base+size overflows).
func newAllocator(base, size uint64) *allocator {
	if size == 0 || base > math.MaxUint64-size {
		return nil
	}
	start, ok := alignUp(base)
	end := (base + size) &^ (placeAlign - 1)
	if !ok || end <= start {
		return nil
	}
	a := &allocator{
		start:  start,
		end:    end,
		byAddr: btree.NewG(btreeDegree, byAddr),
		bySize: btree.NewG(btreeDegree, bySizeAddr),
		used:   map[uint64]uint64{},
	}
	a.insertFree(extent{start, end - start})
	return a
}

// capacity is the number of bytes the allocator manages.
func (a *allocator) capacity() uint64 { return a.end - a.start }

// alloc returns the address of size bytes (rounded up to placeAlign), and
// the rounded size; ok is false when no free extent fits.
func (a *allocator) alloc(size uint64) (addr, rounded uint64, ok bool) {
	need, ok := alignUp(size)
	if !ok || size == 0 || need > a.capacity()-a.inUse {
		return 0, 0, false
	}
	var e extent
	found := false
	a.bySize.AscendGreaterOrEqual(extent{size: need}, func(x extent) bool {
		e, found = x, true
		return false
	})
	if !found {
		return 0, 0, false
	}
	a.removeFree(e)
	if rest := e.size - need; rest > 0 {
		a.insertFree(extent{e.addr + need, rest})
	}
	a.used[e.addr] = need
	a.inUse += need
	return e.addr, need, true
}

// free returns the place at addr, merging it with free neighbours. It
// reports false, changing nothing, for an address that is not a place.
func (a *allocator) free(addr uint64) bool {
	size, ok := a.used[addr]
	if !ok {
		return false
	}
	delete(a.used, addr)
	a.inUse -= size
	e := extent{addr, size}
	var prev extent
	havePrev := false
	a.byAddr.DescendLessOrEqual(extent{addr: addr}, func(x extent) bool {
		prev, havePrev = x, true
		return false
	})
	if havePrev && prev.addr+prev.size == addr {
		a.removeFree(prev)
		e = extent{prev.addr, prev.size + e.size}
	}
	if next, ok := a.byAddr.Get(extent{addr: addr + size}); ok {
		a.removeFree(next)
		e.size += next.size
	}
	a.insertFree(e)
	return true
}

// largestFree is the size of the largest free extent.
func (a *allocator) largestFree() uint64 {
	if e, ok := a.bySize.Max(); ok {
		return e.size
	}
	return 0
}

func (a *allocator) insertFree(e extent) {
	a.byAddr.ReplaceOrInsert(e)
	a.bySize.ReplaceOrInsert(e)
}

func (a *allocator) removeFree(e extent) {
	a.byAddr.Delete(e)
	a.bySize.Delete(e)
}

// take marks the place [addr, addr+size) in use, as alloc would have
// handed it out: a new leader rebuilding its allocators from the places
// it loaded. It reports false, changing nothing, when the place is not
// aligned, not a multiple of placeAlign, or not wholly free (outside the
// span, or overlapping a place taken already).
func (a *allocator) take(addr, size uint64) bool {
	if size == 0 || addr%placeAlign != 0 || size%placeAlign != 0 || addr < a.start || addr > a.end || size > a.end-addr {
		return false
	}
	var e extent
	found := false
	a.byAddr.DescendLessOrEqual(extent{addr: addr}, func(x extent) bool {
		e, found = x, true
		return false
	})
	if !found || e.addr+e.size < addr+size {
		return false
	}
	a.removeFree(e)
	if left := addr - e.addr; left > 0 {
		a.insertFree(extent{e.addr, left})
	}
	if right := e.addr + e.size - (addr + size); right > 0 {
		a.insertFree(extent{addr + size, right})
	}
	a.used[addr] = size
	a.inUse += size
	return true
}
