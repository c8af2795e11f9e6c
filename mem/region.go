package mem

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xferio/xfer/internal/sys"
)

// defaultHugePageSize is used when the kernel does not report its huge page
// size.
const defaultHugePageSize = 2 << 20

// RegionOptions configures NewRegion. The zero value of every field except
// Size is a usable default.
type RegionOptions struct {
	// Size is the length of the region in bytes. It must be positive and is
	// rounded up to the page size: the base page size, or the huge page size
	// (2 MiB on most hosts) with HugeExplicit.
	Size int
	// HugePages selects how to ask for huge pages. Zero is HugeAuto.
	HugePages HugePages
	// Shared backs the region with a memfd mapped MAP_SHARED, so that a
	// process on the same host can map the same memory through FD. When
	// false, the region is private anonymous memory.
	Shared bool
	// Name labels the memfd of a shared region in /proc/PID/fd and
	// /proc/PID/maps. Zero is "xfer". It is ignored when Shared is false.
	Name string
}

// Region is a span of memory that transports can register with a NIC or
// share with a peer. Its memory comes from mmap, never from the Go heap, so
// the garbage collector never scans or frees it.
//
// A Region's methods are safe for concurrent use. Close must not run while
// the memory is still in use: after Close the memory is unmapped and any
// slice obtained from Bytes must no longer be touched.
type Region struct {
	mem    []byte // the whole mapping; never changed after construction
	fd     int    // memfd of a shared region, or -1
	owned  bool   // Close unmaps mem and closes fd (or frees device memory)
	loc    Location
	free   func() error // frees owned device memory
	closed atomic.Bool

	// roFD is fd opened again read-only, for peers that may only read
	// (ReadOnlyFD); opened on first use, closed by Close.
	roMu    sync.Mutex
	roFD    int
	roOpen  bool // roFD is open
	roTried bool
}

// Location is where the region's memory lives: host memory, or a GPU's.
func (r *Region) Location() Location { return r.loc }

// NewRegion maps a new region as opts describes. Close it to unmap it.
func NewRegion(opts RegionOptions) (*Region, error) {
	if opts.Size <= 0 {
		return nil, fmt.Errorf("new region of %d bytes: size must be positive", opts.Size)
	}
	if _, err := opts.HugePages.MarshalText(); err != nil {
		return nil, fmt.Errorf("new region: %w", err)
	}
	hugeTLB := opts.HugePages == HugeExplicit
	page := sys.PageSize()
	if hugeTLB {
		page = hugePageSize()
	}
	size := alignUp(opts.Size, page)
	if size < opts.Size {
		return nil, fmt.Errorf("new region of %d bytes: size too large", opts.Size)
	}
	// The mapping is lazy, so the kernel would grant it and fail later, at
	// a page fault far from here: refuse a region the host cannot hold.
	if total, err := sys.TotalMemory(); err == nil && uint64(size) > total {
		return nil, fmt.Errorf("new region of %d MiB: more than this host's %d MiB of memory", size>>20, total>>20)
	}

	r := &Region{fd: -1, owned: true}
	var err error
	if opts.Shared {
		r.mem, r.fd, err = mapShared(opts.Name, size, hugeTLB)
	} else {
		r.mem, err = sys.MmapAnon(size, hugeTLB)
	}
	if err != nil {
		if hugeTLB {
			return nil, hugeTLBError(size, page, err)
		}
		return nil, fmt.Errorf("new region: %w", err)
	}
	if opts.HugePages == HugeAuto {
		// Only advice: it fails on kernels without transparent huge
		// pages, and then the region simply uses base pages.
		_ = sys.MadviseHugepage(r.mem)
	}
	return r, nil
}

// mapShared creates a memfd of size bytes and maps it MAP_SHARED.
func mapShared(name string, size int, hugeTLB bool) ([]byte, int, error) {
	if name == "" {
		name = "xfer"
	}
	fd, err := sys.MemfdCreate(name, hugeTLB)
	if err != nil {
		return nil, -1, err
	}
	if err := sys.Ftruncate(fd, int64(size)); err != nil {
		sys.Close(fd)
		return nil, -1, err
	}
	// A peer that takes the memfd (shm maps it) must not be able to
	// shrink it under this process's mapping, which would then fault.
	if err := sys.SealSize(fd); err != nil {
		sys.Close(fd)
		return nil, -1, err
	}
	b, err := sys.MmapShared(fd, size)
	if err != nil {
		sys.Close(fd)
		return nil, -1, err
	}
	return b, fd, nil
}

// hugePageSize returns the kernel's default huge page size.
func hugePageSize() int {
	if h, err := sys.HugeTLBPages(); err == nil && h.PageSize > 0 {
		return h.PageSize
	}
	return defaultHugePageSize
}

// hugeTLBError explains a failure to map size bytes of explicit huge pages
// of pageSize bytes each. When the kernel's pool is too small, which is the
// usual cause, it says so and how to grow it.
func hugeTLBError(size, pageSize int, err error) error {
	if errors.Is(err, ErrNotSupported) {
		return fmt.Errorf("new region: %w", err)
	}
	const fix = "reserve them with `echo N > /proc/sys/vm/nr_hugepages` (as root) or use HugeAuto"
	need := size / pageSize
	h, herr := sys.HugeTLBPages()
	switch {
	case herr != nil:
		return fmt.Errorf("new region of %d bytes: %w: %v; %s: %w", size, ErrNoHugePages, herr, fix, err)
	case h.Free-h.Reserved < need:
		return fmt.Errorf("new region of %d bytes: %w: need %d huge page(s) of %d KiB, the kernel has %d reserved and %d available; %s: %w",
			size, ErrNoHugePages, need, pageSize>>10, h.Total, h.Free-h.Reserved, fix, err)
	}
	return fmt.Errorf("new region of %d bytes with explicit huge pages: %w", size, err)
}

// WrapRegion makes a Region of memory the caller mapped. The caller keeps
// ownership: Close does not unmap it, and the memory must stay mapped until
// the Region is closed and no Buffer of it is in use. b should come from
// mmap, not the Go heap. WrapRegion rejects an empty b.
func WrapRegion(b []byte) (*Region, error) {
	if len(b) == 0 {
		return nil, errors.New("wrap region: empty memory")
	}
	return &Region{mem: b[:len(b):len(b)], fd: -1}, nil
}

// Bytes returns the region's memory, or nil after Close.
func (r *Region) Bytes() []byte {
	if r.closed.Load() {
		return nil
	}
	return r.mem
}

// Addr returns the address of the region's first byte, or 0 after Close.
func (r *Region) Addr() uintptr {
	if r.closed.Load() {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
}

// Len returns the region's length in bytes, or 0 after Close.
func (r *Region) Len() int {
	if r.closed.Load() {
		return 0
	}
	return len(r.mem)
}

// FD returns the memfd behind a shared region, or -1 for private or wrapped
// memory and after Close. The Region owns the descriptor: map it, or pass it
// to a peer, but do not close it.
func (r *Region) FD() int {
	if r.closed.Load() {
		return -1
	}
	return r.fd
}

// ReadOnlyFD returns a descriptor of the region's memfd opened read-only,
// or -1 when the region has none (private or wrapped memory, after Close,
// or a kernel without /proc or memfd seals). A peer given it can map the
// memory for reading only. Before it first returns one it seals the memfd
// against writes (sys.SealWrites): from then on the kernel refuses a new
// writable mapping, and any write, through every descriptor of the file,
// also one its holder opens again writable through /proc/PID/fd, which
// the read-only descriptor alone would not stop; this Region's own
// mapping, made before, stays writable. So once a region has a read-only
// descriptor it can never be mapped writable again: a handle that grants
// write needs a region of its own. It is opened on first use, once, and
// the Region owns it: do not close it.
func (r *Region) ReadOnlyFD() int {
	r.roMu.Lock()
	defer r.roMu.Unlock()
	if r.closed.Load() || r.fd < 0 {
		return -1
	}
	if !r.roTried {
		r.roTried = true
		if ro, err := sys.ReopenReadOnly(r.fd); err == nil {
			if sys.SealWrites(r.fd) == nil {
				r.roFD, r.roOpen = ro, true
			} else {
				sys.Close(ro)
			}
		}
	}
	if !r.roOpen {
		return -1
	}
	return r.roFD
}

// Owned reports whether the Region mapped its memory itself, so that Close
// unmaps it. It is false for WrapRegion.
func (r *Region) Owned() bool { return r.owned }

// Contains reports whether b lies entirely within the region and, if so, the
// offset of b's first byte. An empty b counts when its address lies in the
// region or at its end. Contains is false after Close.
func (r *Region) Contains(b []byte) (off int, ok bool) {
	base := r.Addr()
	if base == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base {
		return 0, false
	}
	d := p - base
	if d > uintptr(len(r.mem)) || uintptr(len(b)) > uintptr(len(r.mem))-d {
		return 0, false
	}
	return int(d), true
}

// Close unmaps the region's memory and closes its memfd, if the Region owns
// them. It is idempotent and safe on a nil Region. Every Pool and Buffer on
// the region must be out of use before Close.
func (r *Region) Close() error {
	if r == nil || r.closed.Swap(true) {
		return nil
	}
	r.roMu.Lock()
	if r.roOpen {
		sys.Close(r.roFD)
		r.roOpen = false
	}
	r.roMu.Unlock()
	if !r.owned {
		return nil
	}
	if r.free != nil {
		return r.free()
	}
	err := sys.Munmap(r.mem)
	if r.fd >= 0 {
		err = errors.Join(err, sys.Close(r.fd))
	}
	return err
}

// alignUp rounds n up to a multiple of align, a power of two. It overflows
// to a value below n when n is within align of the largest int.
func alignUp(n, align int) int {
	return (n + align - 1) &^ (align - 1)
}
