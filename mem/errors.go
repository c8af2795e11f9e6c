package mem

import (
	"errors"

	"github.com/xferio/xfer/internal/sys"
)

var (
	// ErrNotSupported means registered memory cannot be created on this
	// platform or build. The wrapping error names the operation.
	ErrNotSupported = sys.ErrNotSupported
	// ErrClosed means the Pool or Region was used after Close.
	ErrClosed = errors.New("use of closed pool or region")
	// ErrNoHugePages means HugeExplicit memory was asked for but the kernel
	// has too few explicit huge pages reserved. The wrapping error says how
	// many are needed and how to reserve them.
	ErrNoHugePages = errors.New("no huge pages available")
	// ErrPoolExhausted means no free block of a Pool is large enough for a
	// request. The wrapping error states the requested size, the free bytes
	// and the largest free block, as in "pool exhausted: need 4194304 bytes,
	// 1048576 free, largest free block 524288".
	ErrPoolExhausted = errors.New("pool exhausted")
	// ErrDoubleFree means Free was given a Buffer whose memory is already
	// free.
	ErrDoubleFree = errors.New("double free")
	// ErrOverlap means Free was given a Buffer that is not an allocated
	// block of the Pool but overlaps one.
	ErrOverlap = errors.New("buffer overlaps an allocated block")
	// ErrNotAllocated means Free was given a Buffer that lies outside the
	// memory the Pool manages, or the zero Buffer.
	ErrNotAllocated = errors.New("buffer was not allocated by this pool")
	// ErrForeignBuffer means Free was given a Buffer from another Pool.
	ErrForeignBuffer = errors.New("buffer belongs to another pool")
)
