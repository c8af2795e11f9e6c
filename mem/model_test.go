package mem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// model is a reference for a Pool: a bitmap with one entry per MinAlign
// unit of the managed span. Slow and obviously right, it decides what the
// Pool must answer to every operation.
type model struct {
	p     *Pool
	unit  int
	inUse []bool   // per unit
	live  []Buffer // allocated Buffers, in no order
	dead  []Buffer // freed Buffers, for double frees
}

func newModel(p *Pool) *model {
	return &model{
		p:     p,
		unit:  p.minAlign,
		inUse: make([]bool, (p.end-p.start)/p.minAlign),
	}
}

// units returns the range of units that bytes [lo, hi) of the region touch.
func (m *model) units(lo, hi int) (int, int) {
	return (lo - m.p.start) / m.unit, (hi - m.p.start + m.unit - 1) / m.unit
}

// fits reports whether a free run of size bytes starts at an address
// aligned to align.
func (m *model) fits(size, align int) bool {
	n := alignUp(size, m.unit) / m.unit
	run := 0
	for i, used := range m.inUse {
		if used {
			run = 0
			continue
		}
		if run == 0 && (m.p.base+uintptr(m.p.start+i*m.unit))%uintptr(align) != 0 {
			continue // a run must start aligned
		}
		if run++; run == n {
			return true
		}
	}
	return false
}

// alloc allocates with AllocAligned, or with Alloc when align is 0.
func (m *model) alloc(size, align int) error {
	var b Buffer
	var err error
	if align == 0 {
		b, err = m.p.Alloc(size)
	} else {
		b, err = m.p.AllocAligned(size, align)
	}
	if err != nil {
		if !errors.Is(err, ErrPoolExhausted) {
			return fmt.Errorf("AllocAligned(%d, %d): %w", size, align, err)
		}
		if m.fits(size, max(align, m.unit)) {
			return fmt.Errorf("AllocAligned(%d, %d) failed though a block fits: %v", size, align, err)
		}
		return nil
	}
	buf := b.Bytes()
	switch addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf))); {
	case len(buf) != size || cap(buf) != size || b.Len() != size:
		return fmt.Errorf("AllocAligned(%d, %d): len %d, cap %d", size, align, len(buf), cap(buf))
	case addr%uintptr(max(align, m.unit)) != 0:
		return fmt.Errorf("AllocAligned(%d, %d): address %#x misaligned", size, align, addr)
	case addr != m.p.r.Addr()+uintptr(b.Offset()):
		return fmt.Errorf("AllocAligned(%d, %d): address %#x does not match offset %d", size, align, addr, b.Offset())
	}
	lo, hi := m.units(b.off, b.off+size)
	if lo < 0 || hi > len(m.inUse) {
		return fmt.Errorf("AllocAligned(%d, %d) = block at %d outside the pool", size, align, b.off)
	}
	for i := lo; i < hi; i++ {
		if m.inUse[i] {
			return fmt.Errorf("AllocAligned(%d, %d) = offset %d, which overlaps a live block", size, align, b.off)
		}
		m.inUse[i] = true
	}
	m.live = append(m.live, b)
	return nil
}

func (m *model) free(i int) error {
	b := m.live[i]
	m.live[i] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
	if err := m.p.Free(b); err != nil {
		return fmt.Errorf("Free(live block at %d, %d bytes): %w", b.off, b.n, err)
	}
	lo, hi := m.units(b.off, b.off+b.n)
	for i := lo; i < hi; i++ {
		m.inUse[i] = false
	}
	m.dead = append(m.dead, b)
	if len(m.dead) > 64 {
		m.dead = m.dead[1:]
	}
	return nil
}

// badFree frees a Buffer that is not a live block and checks that the Pool
// rejects it for the right reason and is left unchanged.
func (m *model) badFree(off, n int) error {
	size := alignUp(n, m.unit)
	for _, b := range m.live {
		if b.off == off && alignUp(b.n, m.unit) == size && n > 0 {
			return nil // it is a live block after all
		}
	}
	want := m.classify(off, n)
	before := m.p.Stats()
	err := m.p.Free(Buffer{p: m.p, off: off, n: n})
	if !errors.Is(err, want) {
		return fmt.Errorf("Free(%d bytes at %d) = %v, want %v", n, off, err, want)
	}
	if after := m.p.Stats(); after != before {
		return fmt.Errorf("Free(%d bytes at %d) changed the stats from %+v to %+v", n, off, before, after)
	}
	return nil
}

// classify says which error freeing the non-block [off, off+n) must give.
func (m *model) classify(off, n int) error {
	p := m.p
	if n <= 0 || off < 0 || off >= p.end {
		return ErrNotAllocated
	}
	lo, hi, whole := max(off, p.start), p.end, false
	if n <= p.end-off {
		hi = min(off+alignUp(n, m.unit), p.end)
		whole = off >= p.start && hi == off+alignUp(n, m.unit)
	}
	if lo >= hi {
		return ErrNotAllocated
	}
	ulo, uhi := m.units(lo, hi)
	for i := ulo; i < uhi; i++ {
		if m.inUse[i] {
			return ErrOverlap
		}
	}
	if !whole {
		return ErrNotAllocated
	}
	return ErrDoubleFree
}

// verify checks the Pool's invariants and compares its stats with the
// model's.
func (m *model) verify() error {
	if err := m.p.check(); err != nil {
		return err
	}
	var free, largest, runs, run int
	for _, used := range m.inUse {
		if used {
			run = 0
			continue
		}
		if run == 0 {
			runs++
		}
		run++
		free++
		largest = max(largest, run)
	}
	s := m.p.Stats()
	want := PoolStats{
		Capacity:    uint64(len(m.inUse) * m.unit),
		Free:        uint64(free * m.unit),
		InUse:       uint64((len(m.inUse) - free) * m.unit),
		LargestFree: uint64(largest * m.unit),
		FreeBlocks:  runs,
		Allocated:   len(m.live),
	}
	got := PoolStats{
		Capacity:    s.Capacity,
		Free:        s.Free,
		InUse:       s.InUse,
		LargestFree: s.LargestFree,
		FreeBlocks:  s.FreeBlocks,
		Allocated:   s.Allocated,
	}
	if got != want {
		return fmt.Errorf("stats %+v, model says %+v", got, want)
	}
	return nil
}

// step decodes one operation from the front of ops, applies it to the
// Pool and the model, and returns the rest of ops.
func (m *model) step(ops []byte) ([]byte, error) {
	if len(ops) < 4 {
		return nil, nil
	}
	op, arg, x := ops[0], int(binary.LittleEndian.Uint16(ops[1:])), int(ops[3])
	ops = ops[4:]
	capacity := m.p.end - m.p.start
	var err error
	switch op % 8 {
	case 0, 1:
		err = m.alloc(1+arg%max(1, capacity/32), 0)
	case 2: // up to capacity and beyond, so that the pool runs dry
		err = m.alloc(1+arg%(capacity+capacity/8), 0)
	case 3: // aligned alloc
		err = m.alloc(1+arg%max(1, capacity/16), 1<<(x%17))
	case 4, 5:
		if len(m.live) > 0 {
			err = m.free(arg % len(m.live))
		}
	case 6: // free a buffer made up from nothing
		err = m.badFree(arg%(capacity+2048)-1024, x*37)
	case 7: // free a stale or skewed copy of a block
		switch {
		case x%2 == 0 && len(m.dead) > 0:
			b := m.dead[arg%len(m.dead)]
			err = m.badFree(b.off, b.n)
		case len(m.live) > 0:
			b := m.live[arg%len(m.live)]
			err = m.badFree(b.off+(x/2%8-4)*m.unit/2, b.n+(x/16-8)*8)
		}
	}
	if err != nil {
		return nil, err
	}
	return ops, m.verify()
}

// runModel sets up a pool as the first bytes of data ask and runs the rest
// of data as operations against it and the model.
func runModel(t testing.TB, r *Region, data []byte) {
	if len(data) < 2 {
		return
	}
	// A base address that is not page-aligned, and a MinAlign from 8 to
	// 256 bytes, so that offset and address alignment differ.
	skew, minAlign := 8*int(data[0]%64), 8<<(data[1]%6)
	w, err := WrapRegion(r.Bytes()[skew:])
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := NewPool(w, PoolOptions{MinAlign: minAlign})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := newModel(p)
	if err := m.verify(); err != nil {
		t.Fatal(err)
	}
	for ops, n := data[2:], 0; len(ops) > 0; n++ {
		if ops, err = m.step(ops); err != nil {
			t.Fatalf("op %d: %v", n, err)
		}
	}
	for len(m.live) > 0 {
		if err := m.free(0); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.verify(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.FreeBlocks != 1 || s.InUse != 0 {
		t.Fatalf("after freeing everything: %+v", s)
	}
}

// TestModel runs random operations against the Pool and the model.
func TestModel(t *testing.T) {
	r := newTestRegion(t, RegionOptions{Size: 256 << 10, HugePages: HugeOff})
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x6d656d))
			data := make([]byte, 2+4*3000)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			runModel(t, r, data)
		})
	}
}

// FuzzAllocator interprets its input as a pool configuration and a
// sequence of allocations, frees and bogus frees, and checks the Pool
// against the model after each one.
func FuzzAllocator(f *testing.F) {
	r := newTestRegion(f, RegionOptions{Size: 16 << 10, HugePages: HugeOff})
	f.Add([]byte{0, 3, 0, 0, 16, 0, 4, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 255, 255, 0, 0, 255, 255, 0, 4, 0, 0, 0, 7, 0, 0, 0})
	f.Add([]byte{5, 5, 3, 10, 0, 12, 3, 1, 0, 16, 6, 0, 4, 9, 4, 1, 0, 0, 7, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxOps = 256 // keep each run, and minimisation, short
		runModel(t, r, data[:min(len(data), 2+4*maxOps)])
	})
}
