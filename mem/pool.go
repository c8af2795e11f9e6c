package mem

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/google/btree"
)

const (
	// DefaultMinAlign is the alignment, in bytes, of every Buffer when
	// PoolOptions.MinAlign is zero: one cache line.
	DefaultMinAlign = 64
	// MaxAlign is the largest alignment a Pool accepts: 1 GiB, the largest
	// huge page.
	MaxAlign = 1 << 30
)

// btreeDegree sets the fan-out of the free extent indexes.
const btreeDegree = 32

// PoolOptions configures NewPool. The zero value is a usable default.
type PoolOptions struct {
	// MinAlign is the alignment of every Buffer's address and the unit to
	// which sizes are rounded up. It must be a power of two no larger than
	// MaxAlign. Zero means DefaultMinAlign.
	MinAlign int
}

// PoolStats is a snapshot of a Pool's state. Sizes are in bytes and count
// whole blocks, that is requested sizes rounded up to MinAlign.
type PoolStats struct {
	// Capacity is the number of bytes the Pool manages: the region, less
	// what had to be cut off its ends to align it to MinAlign.
	Capacity uint64
	// InUse is the total size of the allocated blocks.
	InUse uint64
	// Free is Capacity - InUse.
	Free uint64
	// LargestFree is the size of the largest free block.
	LargestFree uint64
	// FreeBlocks is the number of free blocks. Adjacent free blocks are
	// always merged.
	FreeBlocks int
	// Allocated is the number of allocated blocks.
	Allocated int
	// Allocs and Frees count successful calls to the Alloc methods and Free.
	Allocs, Frees uint64
	// Failures counts Alloc calls that failed because no free block fit,
	// including AllocWait calls that gave up.
	Failures uint64
	// Fragmentation is 1 - LargestFree/Free: 0 when the free memory is one
	// block (or there is none), approaching 1 as it splinters.
	Fragmentation float64
}

// extent is a free block: size bytes at region offset off.
type extent struct {
	off, size int
}

func byOffset(a, b extent) bool { return a.off < b.off }

func bySizeOffset(a, b extent) bool {
	return a.size < b.size || a.size == b.size && a.off < b.off
}

// Pool allocates Buffers from a Region. It is a best-fit allocator: free
// blocks are indexed by offset, to merge neighbours on Free, and by (size,
// offset), to find the smallest block that fits. Every block starts at an
// address aligned to MinAlign and its size is a multiple of MinAlign.
//
// A Pool is safe for concurrent use. It never touches the memory it hands
// out. Misuse of Free (a double free, a Buffer of another Pool) returns an
// error and leaves the Pool unchanged.
type Pool struct {
	r        *Region
	base     uintptr // address of the region's first byte
	start    int     // first region offset the pool manages
	end      int     // region offset just past the last managed byte
	minAlign int

	mu       sync.Mutex
	byOff    *btree.BTreeG[extent] // free blocks by offset
	bySize   *btree.BTreeG[extent] // free blocks by (size, offset)
	used     map[int]int           // allocated blocks: offset to size
	free     int                   // bytes in free blocks
	closed   bool
	waiters  chan struct{} // closed and cleared by Free and Close; nil if nobody waits
	allocs   uint64
	frees    uint64
	failures uint64

	// Held ranges (Hold) and the blocks freed while a hold covered them,
	// kept out of the free lists until no hold does: offsets and sizes.
	// Both are short: holds are rare (abandoned operations).
	holds []extent
	limbo []extent
}

// NewPool makes a Pool that manages the memory of r. The Pool does not own
// r: close the Pool, then the Region, once no Buffer is in use.
func NewPool(r *Region, opts PoolOptions) (*Pool, error) {
	if r == nil {
		return nil, errors.New("new pool: nil region")
	}
	align := opts.MinAlign
	if align == 0 {
		align = DefaultMinAlign
	}
	if !validAlign(align) {
		return nil, fmt.Errorf("new pool: MinAlign %d is not a power of two between 1 and %d", opts.MinAlign, MaxAlign)
	}
	base, n := r.Addr(), r.Len()
	if base == 0 {
		return nil, fmt.Errorf("new pool: %w", ErrClosed)
	}
	// Manage the largest MinAlign-aligned span of the region.
	start := int(alignUpAddr(base, align) - base)
	end := start + (n-start)&^(align-1)
	if start >= n || end <= start {
		return nil, fmt.Errorf("new pool: region of %d bytes at %#x holds no block aligned to %d bytes", n, base, align)
	}
	p := &Pool{
		r:        r,
		base:     base,
		start:    start,
		end:      end,
		minAlign: align,
		byOff:    btree.NewG(btreeDegree, byOffset),
		bySize:   btree.NewG(btreeDegree, bySizeOffset),
		used:     make(map[int]int),
	}
	p.insertFree(extent{start, end - start})
	return p, nil
}

// Region returns the Region the Pool allocates from.
func (p *Pool) Region() *Region { return p.r }

// Buffer is a block of memory allocated from a Pool. It is a small value:
// copy it freely, but Free exactly one copy, once. The zero Buffer holds no
// memory.
type Buffer struct {
	p   *Pool
	off int // offset of the block in the Pool's Region
	n   int // requested size
}

// Bytes returns the Buffer's memory, a view into the Region with length and
// capacity equal to the requested size. It returns nil for the zero Buffer
// and after the Region is closed. The slice must not be used after Free.
func (b Buffer) Bytes() []byte {
	if b.p == nil {
		return nil
	}
	m := b.p.r.Bytes()
	if m == nil {
		return nil
	}
	return m[b.off : b.off+b.n : b.off+b.n]
}

// Offset returns the offset of the Buffer's first byte in its Region.
func (b Buffer) Offset() int { return b.off }

// Len returns the requested size of the Buffer.
func (b Buffer) Len() int { return b.n }

// Region returns the Region the Buffer lies in, or nil for the zero Buffer.
func (b Buffer) Region() *Region {
	if b.p == nil {
		return nil
	}
	return b.p.r
}

// Pool returns the Pool the Buffer came from, or nil for the zero Buffer.
func (b Buffer) Pool() *Pool { return b.p }

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.p == nil }

// Alloc allocates size bytes aligned to MinAlign. It fails with an error
// wrapping ErrPoolExhausted when no free block is large enough, and with
// ErrClosed after Close.
func (p *Pool) Alloc(size int) (Buffer, error) {
	return p.AllocAligned(size, p.minAlign)
}

// AllocAligned allocates size bytes at an address aligned to align, a power
// of two no larger than MaxAlign. An align below MinAlign means MinAlign. It
// fails like Alloc.
func (p *Pool) AllocAligned(size, align int) (Buffer, error) {
	if err := p.checkRequest(size, align); err != nil {
		return Buffer{}, err
	}
	align = max(align, p.minAlign)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Buffer{}, fmt.Errorf("alloc %d bytes: %w", size, ErrClosed)
	}
	b, ok := p.allocLocked(size, align)
	if !ok {
		p.failures++
		return Buffer{}, p.exhaustedLocked(size, align)
	}
	return b, nil
}

// AllocWait is Alloc, but when no free block is large enough it waits for
// Frees until one is, or until ctx is done, and then returns an error that
// wraps ctx.Err(). A request larger than the Pool's capacity fails at once
// with ErrPoolExhausted, and Close wakes waiters with ErrClosed. Waiters are
// not served in order: a small request may overtake a large one. When
// memory is free AllocWait succeeds even if ctx is already done.
func (p *Pool) AllocWait(ctx context.Context, size int) (Buffer, error) {
	if err := p.checkRequest(size, p.minAlign); err != nil {
		return Buffer{}, err
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return Buffer{}, fmt.Errorf("alloc %d bytes: %w", size, ErrClosed)
		}
		b, ok := p.allocLocked(size, p.minAlign)
		if ok {
			p.mu.Unlock()
			return b, nil
		}
		if size > p.end-p.start {
			p.failures++
			err := p.exhaustedLocked(size, p.minAlign)
			p.mu.Unlock()
			return Buffer{}, err
		}
		if p.waiters == nil {
			p.waiters = make(chan struct{})
		}
		wake := p.waiters
		p.mu.Unlock()

		select {
		case <-wake:
		case <-ctx.Done():
			p.mu.Lock()
			p.failures++
			p.mu.Unlock()
			return Buffer{}, fmt.Errorf("wait to alloc %d bytes: %w", size, ctx.Err())
		}
	}
}

// checkRequest validates the arguments of an allocation.
func (p *Pool) checkRequest(size, align int) error {
	if size <= 0 {
		return fmt.Errorf("alloc %d bytes: size must be positive", size)
	}
	if !validAlign(align) {
		return fmt.Errorf("alloc %d bytes: alignment %d is not a power of two between 1 and %d", size, align, MaxAlign)
	}
	return nil
}

// allocLocked carves a block of size bytes, rounded up to MinAlign, at an
// address aligned to align from the smallest free block that can hold it.
// It reports false when there is none.
func (p *Pool) allocLocked(size, align int) (Buffer, bool) {
	if size > p.free {
		return Buffer{}, false
	}
	need := alignUp(size, p.minAlign)
	var e extent
	var pad int
	found := false
	p.bySize.AscendGreaterOrEqual(extent{size: need}, func(x extent) bool {
		addr := p.base + uintptr(x.off)
		pad = int(alignUpAddr(addr, align) - addr)
		if x.size-pad < need {
			return true // too small once aligned; try the next larger block
		}
		e, found = x, true
		return false
	})
	if !found {
		return Buffer{}, false
	}
	p.removeFree(e)
	if pad > 0 {
		p.insertFree(extent{e.off, pad})
	}
	if rest := e.size - pad - need; rest > 0 {
		p.insertFree(extent{e.off + pad + need, rest})
	}
	off := e.off + pad
	p.used[off] = need
	p.allocs++
	return Buffer{p: p, off: off, n: size}, true
}

// exhaustedLocked describes why a request for size bytes aligned to align
// cannot be served.
func (p *Pool) exhaustedLocked(size, align int) error {
	largest := 0
	if e, ok := p.bySize.Max(); ok {
		largest = e.size
	}
	if size > p.end-p.start {
		return fmt.Errorf("%w: need %d bytes, more than the pool's capacity of %d", ErrPoolExhausted, size, p.end-p.start)
	}
	if align > p.minAlign {
		return fmt.Errorf("%w: need %d bytes aligned to %d, %d free, largest free block %d", ErrPoolExhausted, size, align, p.free, largest)
	}
	return fmt.Errorf("%w: need %d bytes, %d free, largest free block %d", ErrPoolExhausted, size, p.free, largest)
}

// Free returns b's block to the Pool, merging it with free neighbours.
// Free reports misuse with an error and leaves the Pool unchanged: a Buffer
// of another Pool (ErrForeignBuffer), one whose memory is already free
// (ErrDoubleFree), one that is not an allocated block but overlaps one
// (ErrOverlap), and one outside the Pool's memory or the zero Buffer
// (ErrNotAllocated). Free works after Close, so Buffers in flight can still
// be returned.
func (p *Pool) Free(b Buffer) error {
	if b.p != p {
		if b.p == nil {
			return fmt.Errorf("free: zero Buffer: %w", ErrNotAllocated)
		}
		return fmt.Errorf("free %d bytes at offset %d: %w", b.n, b.off, ErrForeignBuffer)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.holds) > 0 || len(p.limbo) > 0 {
		if err := p.freeHeldLocked(b.off, b.n); err != errNotHeld {
			if err != nil {
				return fmt.Errorf("free %d bytes at offset %d: %w", b.n, b.off, err)
			}
			return nil
		}
	}
	if err := p.freeLocked(b.off, b.n); err != nil {
		return fmt.Errorf("free %d bytes at offset %d: %w", b.n, b.off, err)
	}
	return nil
}

// errNotHeld: a block that no hold covers, freed as usual.
var errNotHeld = errors.New("not held")

// freeHeldLocked frees the block at off of n bytes into limbo when a hold
// overlaps it; errNotHeld when none does.
func (p *Pool) freeHeldLocked(off, n int) error {
	size := alignUp(n, p.minAlign)
	for _, l := range p.limbo {
		if l.off == off {
			return ErrDoubleFree
		}
	}
	e := extent{off, size}
	if !p.heldLocked(e) {
		return errNotHeld
	}
	if got, ok := p.used[off]; !ok || got != size {
		return p.misfreeLocked(off, n)
	}
	p.limbo = append(p.limbo, e)
	return nil
}

// heldLocked reports whether a hold overlaps e.
func (p *Pool) heldLocked(e extent) bool {
	for _, h := range p.holds {
		if h.off < e.off+e.size && e.off < h.off+h.size {
			return true
		}
	}
	return false
}

// Hold keeps the bytes of b, which lie in the Pool's memory, from being
// handed out again until release is called, even when the Buffer they
// belong to is freed meanwhile: that Free succeeds, but its block stays
// out of the free lists (and counted in use) until no hold overlaps it.
// It is for memory a device may still touch after its owner gave up on
// an operation: an abandoned RDMA operation's buffer, until its queue
// pair has completed or flushed it. ok is false, and release does
// nothing, when b does not lie in the Pool's memory. release is
// idempotent.
func (p *Pool) Hold(b []byte) (release func(), ok bool) {
	if len(b) == 0 {
		return func() {}, false
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if addr < p.base+uintptr(p.start) || addr+uintptr(len(b)) > p.base+uintptr(p.end) {
		return func() {}, false
	}
	h := extent{int(addr - p.base), len(b)}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { p.unhold(h) }) }, true
}

// unhold drops one hold h and frees the blocks in limbo that no hold
// covers any more.
func (p *Pool) unhold(h extent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.holds {
		if x == h {
			p.holds = append(p.holds[:i], p.holds[i+1:]...)
			break
		}
	}
	kept := p.limbo[:0]
	for _, e := range p.limbo {
		if p.heldLocked(e) {
			kept = append(kept, e)
			continue
		}
		_ = p.freeLocked(e.off, e.size) // in used since freeHeldLocked checked it
	}
	for i := len(kept); i < len(p.limbo); i++ {
		p.limbo[i] = extent{}
	}
	p.limbo = kept
}

func (p *Pool) freeLocked(off, n int) error {
	if n <= 0 {
		return ErrNotAllocated
	}
	size := alignUp(n, p.minAlign)
	if got, ok := p.used[off]; !ok || got != size {
		return p.misfreeLocked(off, n)
	}
	delete(p.used, off)
	p.frees++

	e := extent{off, size}
	if prev, ok := p.floorFree(off); ok && prev.off+prev.size == off {
		p.removeFree(prev)
		e = extent{prev.off, prev.size + e.size}
	}
	if next, ok := p.byOff.Get(extent{off: off + size}); ok {
		p.removeFree(next)
		e.size += next.size
	}
	p.insertFree(e)

	if p.waiters != nil {
		close(p.waiters)
		p.waiters = nil
	}
	return nil
}

// misfreeLocked classifies a Free of n > 0 bytes at offset off that does
// not match an allocated block. The Buffer stands for the block [off,
// off+n rounded up to MinAlign).
func (p *Pool) misfreeLocked(off, n int) error {
	if off < 0 || off >= p.end {
		return ErrNotAllocated
	}
	// Clip the block to the managed span [start, end), without overflow.
	lo, hi, whole := max(off, p.start), p.end, false
	if n <= p.end-off {
		hi = min(off+alignUp(n, p.minAlign), p.end)
		whole = off >= p.start && hi == off+alignUp(n, p.minAlign)
	}
	if lo >= hi {
		return ErrNotAllocated
	}
	// Free blocks are merged, so an all-free span lies in a single one.
	if f, ok := p.floorFree(lo); !ok || f.off+f.size < hi {
		return ErrOverlap
	}
	if !whole {
		return ErrNotAllocated
	}
	return ErrDoubleFree
}

// floorFree returns the free block with the largest offset not above off.
func (p *Pool) floorFree(off int) (e extent, ok bool) {
	p.byOff.DescendLessOrEqual(extent{off: off}, func(x extent) bool {
		e, ok = x, true
		return false
	})
	return e, ok
}

func (p *Pool) insertFree(e extent) {
	p.byOff.ReplaceOrInsert(e)
	p.bySize.ReplaceOrInsert(e)
	p.free += e.size
}

func (p *Pool) removeFree(e extent) {
	p.byOff.Delete(e)
	p.bySize.Delete(e)
	p.free -= e.size
}

// InUse is Stats().InUse, the total size of the allocated blocks, without
// the rest of the snapshot: cheap enough to call on every allocation.
func (p *Pool) InUse() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return uint64(p.end - p.start - p.free)
}

// Stats returns a snapshot of the Pool's state.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	capacity := p.end - p.start
	s := PoolStats{
		Capacity:   uint64(capacity),
		InUse:      uint64(capacity - p.free),
		Free:       uint64(p.free),
		FreeBlocks: p.byOff.Len(),
		Allocated:  len(p.used),
		Allocs:     p.allocs,
		Frees:      p.frees,
		Failures:   p.failures,
	}
	if e, ok := p.bySize.Max(); ok {
		s.LargestFree = uint64(e.size)
	}
	if s.Free > 0 {
		s.Fragmentation = 1 - float64(s.LargestFree)/float64(s.Free)
	}
	return s
}

// Close makes further allocations fail with ErrClosed and wakes AllocWait
// callers, which then fail too. Free keeps working. Close does not close the
// Region. It is idempotent and safe on a nil Pool.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.waiters != nil {
		close(p.waiters)
		p.waiters = nil
	}
	return nil
}

func validAlign(align int) bool {
	return align > 0 && align <= MaxAlign && bits.OnesCount(uint(align)) == 1
}

// alignUpAddr rounds addr up to a multiple of align, a power of two.
func alignUpAddr(addr uintptr, align int) uintptr {
	a := uintptr(align)
	return (addr + a - 1) &^ (a - 1)
}
