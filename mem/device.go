package mem

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/xferio/xfer/internal/cuda"
)

// NewDeviceRegion allocates size bytes of GPU memory (cuMemAlloc) in the
// device of ctx and makes a Region of it. Close frees the memory; ctx must
// stay open until then.
//
// The Region's Bytes is a view of device addresses: the engine and the
// transports pass it around as an address and a length, and never read or
// write it with the CPU. Neither may its user: a CPU access to device
// memory crashes the process.
func NewDeviceRegion(ctx *cuda.Context, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("new region of %d bytes on cuda:%d: size must be positive", size, ctx.Ordinal())
	}
	p, err := ctx.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("new region of %d MiB on cuda:%d: %w", size>>20, ctx.Ordinal(), err)
	}
	return &Region{mem: deviceView(p, size), fd: -1, owned: true,
		loc: CUDA(ctx.Ordinal()), free: func() error { return ctx.Free(p) }}, nil
}

// WrapDeviceRegion makes a Region of GPU memory that someone else allocated
// (a framework's tensor): size bytes at device address p. The driver must
// know p as device memory; the Region takes its device from the driver.
// The caller keeps ownership: Close frees nothing, and the memory must stay
// allocated until the Region is closed and no Buffer of it is in use.
func WrapDeviceRegion(p uintptr, size int) (*Region, error) {
	if p == 0 || size <= 0 {
		return nil, fmt.Errorf("wrap device memory %#x+%d: empty memory", p, size)
	}
	info, err := cuda.PointerAttributes(p)
	if err != nil {
		return nil, fmt.Errorf("wrap device memory %#x+%d: %w", p, size, err)
	}
	if info.Type != cuda.MemoryDevice {
		return nil, fmt.Errorf("wrap device memory %#x+%d: %w: the driver says it is %s memory", p, size, ErrNotDevice, info.Type)
	}
	if end := uint64(info.Base) + info.Size; uint64(p)+uint64(size) > end || p < info.Base {
		return nil, fmt.Errorf("wrap device memory %#x+%d: %w: its allocation is %#x+%d", p, size, ErrNotDevice, info.Base, info.Size)
	}
	if info.Device < 0 || info.Device > maxDevice {
		return nil, fmt.Errorf("wrap device memory %#x+%d: device %d out of range", p, size, info.Device)
	}
	return &Region{mem: deviceView(p, size), fd: -1, loc: CUDA(info.Device)}, nil
}

// ErrNotDevice is returned by WrapDeviceRegion for memory that is not one
// GPU allocation.
var ErrNotDevice = errors.New("not GPU memory")

// deviceView is the []byte that stands for n bytes at device address p.
// Nothing dereferences it: the garbage collector ignores pointers outside
// its heap, and the engine reads only its address and length.
func deviceView(p uintptr, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}
