//go:build cgo && linux

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xferio/xfer/bytesize"
)

// Context is a retained primary context of one device: the context that
// the CUDA runtime uses for that device, shared by everything in the
// process. Its methods may be called from any goroutine; see the package
// documentation for threading and close order.
type Context struct {
	mu      sync.RWMutex // held for reading by calls, for writing by Close
	ctx     C.CUcontext  // nil once closed
	dev     C.CUdevice
	ordinal int
	name    string // "cuda:N", for messages

	// Streams and events made from the context and not yet closed.
	streams, events atomic.Int64
}

// Retain retains the primary context of device ordinal (cuDeviceGet,
// cuDevicePrimaryCtxRetain), loading the driver first. Close releases it.
func Retain(ordinal int) (*Context, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		have := "no devices"
		switch n {
		case 0:
		case 1:
			have = "1 device, cuda:0"
		default:
			have = fmt.Sprintf("%d devices, cuda:0 to cuda:%d", n, n-1)
		}
		return nil, fmt.Errorf("%s: no such CUDA device: this process sees %s", deviceName(ordinal), have)
	}
	c := &Context{ordinal: ordinal, name: deviceName(ordinal)}
	if rc := C.xcu_retain(C.int(ordinal), &c.dev, &c.ctx); rc != C.CUDA_SUCCESS {
		return nil, newError(rc, "cuDevicePrimaryCtxRetain "+c.name)
	}
	return c, nil
}

// Close releases the primary context (cuDevicePrimaryCtxRelease). When no
// one else in the process retains it, the driver destroys it, with all the
// memory still allocated in it. Close fails, and leaves c open, while
// Streams or Events made from c are open. It is idempotent and nil-safe.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return nil
	}
	if s, e := c.streams.Load(), c.events.Load(); s != 0 || e != 0 {
		return fmt.Errorf("close %s: %s and %s made from it are still open; close them first",
			c.name, plural(s, "stream"), plural(e, "event"))
	}
	c.ctx = nil
	if rc := C.xcu_release(c.dev); rc != C.CUDA_SUCCESS {
		return newError(rc, "cuDevicePrimaryCtxRelease "+c.name)
	}
	return nil
}

// Ordinal returns the device's ordinal, or -1 for a nil Context.
func (c *Context) Ordinal() int {
	if c == nil {
		return -1
	}
	return c.ordinal
}

// lock read-locks c for a call and returns its driver context. When c is
// nil or closed it returns an error matching net.ErrClosed and c is not
// locked; otherwise the caller must call c.mu.RUnlock.
func (c *Context) lock(op string) (C.CUcontext, error) {
	if c == nil {
		return nil, closedErr(op)
	}
	c.mu.RLock()
	if c.ctx == nil {
		c.mu.RUnlock()
		return nil, closedErr(op + " on " + c.name)
	}
	return c.ctx, nil
}

// plural formats n things: "1 stream", "2 streams".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// fail describes the failed call op on c.
func (c *Context) fail(rc C.CUresult, op string) error { return newError(rc, op+" on "+c.name) }

// errNegative rejects a negative size before it reaches the driver as a
// huge size_t.
func errNegative(op string, n int) error { return fmt.Errorf("%s: negative size %d", op, n) }

// Alloc allocates n bytes of device memory (cuMemAlloc) and returns its
// device address. The memory is not initialised; release it with Free.
func (c *Context) Alloc(n int) (uintptr, error) {
	if n < 0 {
		return 0, errNegative("cuMemAlloc", n)
	}
	ctx, err := c.lock("cuMemAlloc")
	if err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	var p C.CUdeviceptr
	if rc := C.xcu_mem_alloc(ctx, C.size_t(n), &p); rc != C.CUDA_SUCCESS {
		return 0, c.fail(rc, "cuMemAlloc "+bytesize.Human(int64(n)))
	}
	return uintptr(p), nil
}

// Free frees device memory that Alloc returned (cuMemFree).
func (c *Context) Free(p uintptr) error {
	ctx, err := c.lock("cuMemFree")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if rc := C.xcu_mem_free(ctx, C.CUdeviceptr(p)); rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuMemFree %#x", p))
	}
	return nil
}

// Memset sets n bytes at p to v (cuMemsetD8). It returns when the memory
// is set.
func (c *Context) Memset(p uintptr, v byte, n int) error {
	if n < 0 {
		return errNegative("cuMemsetD8", n)
	}
	ctx, err := c.lock("cuMemsetD8")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if rc := C.xcu_memset(ctx, C.CUdeviceptr(p), C.uchar(v), C.size_t(n)); rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuMemsetD8 %s at %#x", bytesize.Human(int64(n)), p))
	}
	return nil
}

// Copy copies n bytes from src to dst (cuMemcpy), in any direction: with
// unified addressing the driver tells host from device addresses. It
// returns when the copy is done, device-to-device copies included. Host
// memory must stay valid until it returns (see the package documentation
// on Go heap memory).
func (c *Context) Copy(dst, src uintptr, n int) error {
	if n < 0 {
		return errNegative("cuMemcpy", n)
	}
	ctx, err := c.lock("cuMemcpy")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if rc := C.xcu_memcpy(ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)); rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuMemcpy %s from %#x to %#x", bytesize.Human(int64(n)), src, dst))
	}
	return nil
}

// AddressRange returns the allocation that contains device address p
// (cuMemGetAddressRange): its base address and size.
func (c *Context) AddressRange(p uintptr) (base uintptr, size uint64, err error) {
	ctx, err := c.lock("cuMemGetAddressRange")
	if err != nil {
		return 0, 0, err
	}
	defer c.mu.RUnlock()
	var b C.CUdeviceptr
	var n C.size_t
	if rc := C.xcu_address_range(ctx, C.CUdeviceptr(p), &b, &n); rc != C.CUDA_SUCCESS {
		return 0, 0, c.fail(rc, fmt.Sprintf("cuMemGetAddressRange %#x", p))
	}
	return uintptr(b), uint64(n), nil
}

// IPCHandle returns a handle through which another process on this host
// can map the device allocation at p (cuIpcGetMemHandle). The handle names
// the whole allocation that contains p, and OpenIPC maps that allocation's
// base: a caller that shares an interior pointer finds the base and offset
// with AddressRange first, and sends the offset along.
func (c *Context) IPCHandle(p uintptr) (IPCHandle, error) {
	var h IPCHandle
	ctx, err := c.lock("cuIpcGetMemHandle")
	if err != nil {
		return h, err
	}
	defer c.mu.RUnlock()
	if rc := C.xcu_ipc_get(ctx, C.CUdeviceptr(p), unsafe.Pointer(&h[0])); rc != C.CUDA_SUCCESS {
		return IPCHandle{}, c.fail(rc, fmt.Sprintf("cuIpcGetMemHandle %#x", p))
	}
	return h, nil
}

// OpenIPC maps the allocation of another process that h names
// (cuIpcOpenMemHandle with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) and returns
// its base address in this process. The driver refuses a handle from the
// same process. Unmap it with CloseIPC.
func (c *Context) OpenIPC(h IPCHandle) (uintptr, error) {
	ctx, err := c.lock("cuIpcOpenMemHandle")
	if err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	var p C.CUdeviceptr
	if rc := C.xcu_ipc_open(ctx, unsafe.Pointer(&h[0]), &p); rc != C.CUDA_SUCCESS {
		return 0, c.fail(rc, "cuIpcOpenMemHandle")
	}
	return uintptr(p), nil
}

// CloseIPC unmaps an allocation that OpenIPC mapped (cuIpcCloseMemHandle).
func (c *Context) CloseIPC(p uintptr) error {
	ctx, err := c.lock("cuIpcCloseMemHandle")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if rc := C.xcu_ipc_close(ctx, C.CUdeviceptr(p)); rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuIpcCloseMemHandle %#x", p))
	}
	return nil
}

// HostRegister page-locks b and maps it for the device
// (cuMemHostRegister with CU_MEMHOSTREGISTER_PORTABLE, so every context in
// the process sees it as pinned), which makes copies to and from it
// faster and truly asynchronous. b must be mmap'd memory, never Go heap
// memory: the driver keeps using the pages after the call, behind the
// garbage collector's back. Undo it with HostUnregister before unmapping b.
func (c *Context) HostRegister(b []byte) error {
	ctx, err := c.lock("cuMemHostRegister")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	rc := C.xcu_host_register(ctx, C.uintptr_t(p), C.size_t(len(b)))
	runtime.KeepAlive(b)
	if rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuMemHostRegister %s at %#x", bytesize.Human(int64(len(b))), p))
	}
	return nil
}

// HostUnregister undoes HostRegister of b (cuMemHostUnregister).
func (c *Context) HostUnregister(b []byte) error {
	ctx, err := c.lock("cuMemHostUnregister")
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	rc := C.xcu_host_unregister(ctx, C.uintptr_t(p))
	runtime.KeepAlive(b)
	if rc != C.CUDA_SUCCESS {
		return c.fail(rc, fmt.Sprintf("cuMemHostUnregister %#x", p))
	}
	return nil
}

// DMABufFD exports n bytes of device memory at p as a DMA-BUF
// (cuMemGetHandleForAddressRange with CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD),
// which an RDMA NIC can register (ibv_reg_dmabuf_mr). p and n must be
// multiples of the host page size. The descriptor is the caller's to close.
// It needs a driver of CUDA 11.7 or newer, the open GPU kernel modules,
// and a device with DMABuf in its DeviceInfo; otherwise it fails with an
// *Error, CUDA_ERROR_NOT_SUPPORTED when the driver lacks the call.
func (c *Context) DMABufFD(p uintptr, n uint64) (int, error) {
	op := fmt.Sprintf("cuMemGetHandleForAddressRange %s at %#x", bytesize.Human(int64(n)), p)
	ctx, err := c.lock(op)
	if err != nil {
		return -1, err
	}
	defer c.mu.RUnlock()
	if C.xcu_has_dmabuf() == 0 {
		return -1, &Error{Op: op + " on " + c.name, Code: codeNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED",
			Msg: fmt.Sprintf("driver %s is too old: DMA-BUF export needs CUDA 11.7 or newer", versionString(driverVersion))}
	}
	fd := C.int(-1)
	if rc := C.xcu_dmabuf_fd(ctx, C.CUdeviceptr(p), C.size_t(n), &fd); rc != C.CUDA_SUCCESS {
		return -1, c.fail(rc, op)
	}
	if fd < 0 {
		return -1, errors.New(op + " on " + c.name + ": the driver returned no descriptor")
	}
	return int(fd), nil
}
