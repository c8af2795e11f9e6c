package mem

import (
	"fmt"
	"sync"

	"github.com/xferio/xfer/internal/cuda"
)

// ErrCUDANotAvailable means GPU memory was asked for where there is no
// CUDA: no driver (libcuda.so.1), no GPU, a driver too old, or a build
// without cgo. The error says which, and how to fix it.
var ErrCUDANotAvailable = cuda.ErrNotAvailable

// cudaDriver is the Driver of KindCUDA, over internal/cuda, which loads
// libcuda.so.1 at run time.
type cudaDriver struct{}

func (cudaDriver) Available() error { return cuda.Load() }

func (cudaDriver) Open() Devices { return &cudaDevices{} }

func (cudaDriver) Locate(p uintptr) (int, bool) {
	if cuda.Load() != nil {
		return 0, false
	}
	info, err := cuda.PointerAttributes(p)
	if err != nil || info.Type != cuda.MemoryDevice {
		return 0, false
	}
	return info.Device, true
}

func (cudaDriver) Wrap(p uintptr, size int) (*Region, error) {
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

// cudaDevices is one user's GPUs: their primary contexts and idle
// streams.
type cudaDevices struct {
	ctxs cuda.Contexts
	mu   sync.Mutex
	devs map[int]*cudaDevice
}

func (s *cudaDevices) Get(n int) (Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.devs[n]; d != nil {
		return d, nil
	}
	c, err := s.ctxs.Get(n)
	if err != nil {
		return nil, err
	}
	if s.devs == nil {
		s.devs = map[int]*cudaDevice{}
	}
	d := &cudaDevice{set: s, ctx: c}
	s.devs[n] = d
	return d, nil
}

func (s *cudaDevices) Opened() []int { return s.ctxs.Devices() }

func (s *cudaDevices) Close() error {
	s.mu.Lock()
	s.devs = nil
	s.mu.Unlock()
	return s.ctxs.Close()
}

// cudaDevice is one GPU's retained primary context.
type cudaDevice struct {
	set *cudaDevices
	ctx *cuda.Context
}

func (d *cudaDevice) Location() Location { return CUDA(d.ctx.Ordinal()) }

// Alloc allocates size bytes of GPU memory (cuMemAlloc) in the device's
// context and makes a Region of it.
//
// The Region's Bytes is a view of device addresses: the engine and the
// transports pass it around as an address and a length, and never read or
// write it with the CPU. Neither may its user: a CPU access to device
// memory crashes the process.
func (d *cudaDevice) Alloc(size int) (*Region, error) {
	ctx := d.ctx
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

func (d *cudaDevice) Copy(dst, src uintptr, n int) error { return d.ctx.Copy(dst, src, n) }

func (d *cudaDevice) Pin(b []byte) error { return d.ctx.HostRegister(b) }

func (d *cudaDevice) Unpin(b []byte) error { return d.ctx.HostUnregister(b) }

// DMABuf exports the allocation that holds p as a DMA-BUF
// (cuMemGetHandleForAddressRange).
func (d *cudaDevice) DMABuf(p uintptr) (int, uintptr, error) {
	base, size, err := d.ctx.AddressRange(p)
	if err != nil {
		return -1, 0, err
	}
	fd, err := d.ctx.DMABufFD(base, size)
	if err != nil {
		return -1, 0, err
	}
	return fd, base, nil
}

// IPCHandle returns the CUDA IPC handle of the allocation that holds p
// (cuIpcGetMemHandle).
func (d *cudaDevice) IPCHandle(p uintptr) (IPCHandle, uintptr, error) {
	base, _, err := d.ctx.AddressRange(p)
	if err != nil {
		return IPCHandle{}, 0, err
	}
	h, err := d.ctx.IPCHandle(base)
	if err != nil {
		return IPCHandle{}, 0, err
	}
	return IPCHandle(h), base, nil
}

func (d *cudaDevice) OpenIPC(h IPCHandle) (uintptr, error) { return d.ctx.OpenIPC(cuda.IPCHandle(h)) }

func (d *cudaDevice) CloseIPC(p uintptr) error { return d.ctx.CloseIPC(p) }

func (d *cudaDevice) Stream() (Stream, error) {
	st, err := d.set.ctxs.Stream(d.ctx)
	if err != nil {
		return nil, err
	}
	return &cudaStream{Stream: st, d: d}, nil
}

// cudaStream is a stream taken from a device's idle ones.
type cudaStream struct {
	*cuda.Stream
	d *cudaDevice
}

func (s *cudaStream) Release() { s.d.set.ctxs.PutStream(s.d.ctx, s.Stream) }
