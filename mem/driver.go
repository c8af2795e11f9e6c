package mem

import (
	"errors"
	"unsafe"
)

// Driver is a device memory kind's device interface: what the engine
// needs of that kind. Its methods are safe for concurrent use.
type Driver interface {
	// Available reports whether this process can use the kind: nil, or
	// an error that says what is missing and how to fix it.
	Available() error
	// Open returns an empty set of the kind's devices for one user (an
	// engine), each opened on first use.
	Open() Devices
	// Locate reports which of the kind's devices holds p, as the driver
	// sees it; ok is false for memory that is not the kind's, and where
	// the driver cannot be used.
	Locate(p uintptr) (device int, ok bool)
	// Wrap makes a Region of size bytes at p that someone else allocated
	// on one of the kind's devices (see WrapDeviceRegion). An error that
	// matches ErrNotDevice means p is not the kind's memory.
	Wrap(p uintptr, size int) (*Region, error)
}

// Devices is one user's set of a kind's devices, each opened on first use
// (a GPU's primary context, retained). It is safe for concurrent use.
type Devices interface {
	// Get returns device n, opening it on first use.
	Get(n int) (Device, error)
	// Opened lists the devices opened so far, in order.
	Opened() []int
	// Close closes every device of the set; it is empty and usable again
	// afterwards. Close the Regions of its devices first: their memory
	// is freed through the device.
	Close() error
}

// Device is one opened device: what allocating, copying and staging its
// memory needs. Addresses are the device's (for its memory) or the
// process's (for host memory), as one address space: the kinds that
// xfer moves have unified addressing.
type Device interface {
	// Location is the device's memory location ("cuda:0").
	Location() Location
	// Alloc allocates size bytes of the device's memory as a Region,
	// whose Close frees them; the set must stay open until then.
	Alloc(size int) (*Region, error)
	// Copy copies n bytes from src to dst, either or both the device's
	// memory, and waits for it.
	Copy(dst, src uintptr, n int) error
	// Pin registers host memory b with the device's driver, so that
	// copies between the device and b run at full speed; Unpin undoes
	// it.
	Pin(b []byte) error
	Unpin(b []byte) error
	// Stream takes an idle stream of copies (made if none is idle);
	// give it back with Stream.Release once its work is synchronised.
	Stream() (Stream, error)
}

// DMABufExporter is a Device whose memory a NIC can reach as a DMA-BUF
// (GPUDirect RDMA): the rdma transport registers it with the NIC.
type DMABufExporter interface {
	// DMABuf returns a DMA-BUF of the allocation that holds p (its
	// descriptor, which the caller closes) and that allocation's base.
	DMABuf(p uintptr) (fd int, base uintptr, err error)
}

// IPCExporter is a Device whose memory another process on the host can
// map by a handle (CUDA IPC): the shm transport moves it so.
type IPCExporter interface {
	// IPCHandle returns the handle of the allocation that holds p, and
	// that allocation's base.
	IPCHandle(p uintptr) (h IPCHandle, base uintptr, err error)
	// OpenIPC maps the allocation of another process that h names and
	// returns its address here; CloseIPC unmaps it.
	OpenIPC(h IPCHandle) (uintptr, error)
	CloseIPC(p uintptr) error
}

// IPCHandle names a device allocation to another process on the same
// host; it is plain bytes and may be sent over any channel.
type IPCHandle [64]byte

// Stream is a queue of copies on a device, taken with Device.Stream.
type Stream interface {
	// CopyAsync queues a copy of n bytes from src to dst.
	CopyAsync(dst, src uintptr, n int) error
	// Sync waits for the copies queued.
	Sync() error
	// Release gives the idle stream back to its device.
	Release()
}

// ErrNotDevice is returned by WrapDeviceRegion for memory that is not one
// allocation of a device.
var ErrNotDevice = errors.New("not GPU memory")

// deviceView is the []byte that stands for n bytes at device address p.
// Nothing dereferences it: the garbage collector ignores pointers outside
// its heap, and the engine reads only its address and length.
func deviceView(p uintptr, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}
