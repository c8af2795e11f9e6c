package mem

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Access is the set of rights a registered region grants to remote peers.
type Access uint8

const (
	// AccessRead lets peers READ from the region.
	AccessRead Access = 1 << iota
	// AccessWrite lets peers WRITE into the region.
	AccessWrite
	// AccessReadWrite grants both.
	AccessReadWrite = AccessRead | AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "read-write"
	case 0:
		return "none"
	}
	return "invalid"
}

// Handle describes a Region registered with an engine, as transports need
// it: the engine's number for it, its key and rights, its memory (bytes,
// base address, length, and the memfd behind it), and its pins. The engine
// creates one handle per registration (the root package's region table);
// operations carry a pointer to it (transport.Op.Region), and the target of
// a remote access gets one back from its Host (transport.Resolved). A
// transport that caches something per registered region (an rdma memory
// registration) keys it by handle.
//
// Everything but the pins is fixed when the handle is made. Its methods are
// safe for concurrent use.
//
// Pins keep the memory mapped while an access is in progress: the engine
// pins the handle for each remote access it resolves and each local
// operation it posts; whoever holds the pin unpins it when done. To
// deregister, the engine retires the handle (no new pin succeeds), waits
// with Drain until every pin is gone, and only then unmaps the region.
type Handle struct {
	id     uint32
	key    uint64
	access Access
	mem    []byte
	base   uint64
	fd     int
	loc    Location

	pins    atomic.Int64
	retired atomic.Bool
}

// NewHandle describes region r registered as id, with key and access.
func NewHandle(r *Region, id uint32, key uint64, access Access) *Handle {
	b := r.Bytes()
	fd := r.FD()
	if access&AccessWrite == 0 && fd >= 0 {
		// Peers may not write: they get a descriptor of the memfd, sealed
		// against writes, that the kernel lets them map for reading only
		// (none at all if it cannot be opened or sealed, and then they go
		// through the owner, which checks every access).
		fd = r.ReadOnlyFD()
	}
	return &Handle{id: id, key: key, access: access, mem: b, base: uint64(r.Addr()), fd: fd, loc: r.Location()}
}

// ID is the region's number in its engine.
func (h *Handle) ID() uint32 { return h.id }

// Key is the secret a peer must present to access the region.
func (h *Handle) Key() uint64 { return h.key }

// Access is what the region grants to peers.
func (h *Handle) Access() Access { return h.access }

// Bytes is the whole region.
func (h *Handle) Bytes() []byte { return h.mem }

// Base is the address of the region's first byte.
func (h *Handle) Base() uint64 { return h.base }

// Len is the region's length in bytes.
func (h *Handle) Len() uint64 { return uint64(len(h.mem)) }

// Location is where the region's memory lives. A transport that cannot
// move device memory itself never gets an operation on device memory: the
// engine stages it through host memory.
func (h *Handle) Location() Location { return h.loc }

// FD is the memfd the region maps from offset 0, as peers may have it, or
// -1 when it has none: for a region that grants peers no write, a
// descriptor opened read-only of a memfd sealed against writes
// (Region.ReadOnlyFD), which the kernel lets no one map writable.
func (h *Handle) FD() int { return h.fd }

// Offset is where b, which must lie in the region, starts in it: the
// offset in the memfd of its first byte.
func (h *Handle) Offset(b []byte) int64 {
	return int64(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) - h.base)
}

// Pin keeps the region mapped until Unpin. It reports false, pinning
// nothing, once the handle is retired.
func (h *Handle) Pin() bool {
	h.pins.Add(1)
	if h.retired.Load() {
		h.pins.Add(-1)
		return false
	}
	return true
}

// Unpin ends one access that Pin began.
func (h *Handle) Unpin() { h.pins.Add(-1) }

// Pins is how many accesses are in progress.
func (h *Handle) Pins() int64 { return h.pins.Load() }

// Retire makes every later Pin fail. It is idempotent.
func (h *Handle) Retire() { h.retired.Store(true) }

// Retired reports whether Retire has been called.
func (h *Handle) Retired() bool { return h.retired.Load() }

// Drain waits until no pin is left. Call it after Retire: pins taken before
// it are short (one copy, one transfer), so it polls.
func (h *Handle) Drain() {
	for h.pins.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
}
