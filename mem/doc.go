// Package mem provides the memory that xfer moves: Regions, spans of mmap'd
// memory that transports register with a NIC or share with a peer on the
// same host, and Pools, allocators that hand out Buffers from a Region.
//
// # Regions
//
// NewRegion maps private anonymous memory, or a memfd when
// RegionOptions.Shared is set, and can ask for transparent or explicit huge
// pages (see HugePages). WrapRegion adopts memory the caller mapped. A
// Region's memory never comes from the Go heap: the garbage collector does
// not move, scan or free it, and a NIC may access it at any time.
//
// # Pools and Buffers
//
// A Pool is a best-fit allocator over one Region. Alloc, AllocAligned and
// AllocWait return a Buffer, a small value naming a block of the Region;
// Buffer.Bytes is a view of that block, not a copy. Free returns the block.
// Sizes are rounded up to PoolOptions.MinAlign and every block's address is
// aligned to it. The Pool's bookkeeping lives outside the Region, so the
// Pool never reads or writes the memory it hands out, and misuse of Free is
// reported with an error (ErrDoubleFree, ErrOverlap, ErrNotAllocated,
// ErrForeignBuffer) instead of corrupting the Pool.
//
// # Memory kinds
//
// Memory has a kind (Location: host, or a device's, "cuda:0"). The kinds
// are a table (kinds.go): each row is a kind's names and, for device
// memory, its Driver, through which the engine and the transports open
// the kind's devices (a DeviceSet), allocate, copy, pin host memory and
// take streams of copies. Only this package calls a device's binding
// (internal/cuda); adding a kind is its binding, its Driver and its row.
//
// # Threading
//
// Regions and Pools are safe for concurrent use. The contents of a Buffer
// are not synchronised: whoever holds a Buffer owns its bytes until Free.
//
// # Lifetimes and close order
//
// A Buffer is valid from the Alloc that returned it until its Free. Close
// in this order: stop using and Free the Buffers, then close the Pool, then
// the Region. Closing a Pool makes further Allocs fail with ErrClosed; Free
// still works. Closing a Region unmaps its memory (unless it was wrapped),
// after which Region.Bytes and Buffer.Bytes return nil, and any slice
// obtained earlier must not be touched. Every Close is idempotent and safe
// on a nil receiver.
package mem
