package mem

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
