package mem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// The table of memory kinds
//
// Each memory kind is one row of kinds: its name, the other names
// ParseLocation takes for it, and, for memory on a device, its Driver:
// the one way the engine, its staging and Engine.Copy reach that kind's
// devices. Nothing above mem calls a device's API. Adding a kind (ROCm, a
// file for an offload tier) is its binding's own package (as internal/cuda
// is CUDA's, loaded at run time with a no-cgo twin), a file here that
// implements Driver over it (cuda.go), and its row below.

// KindInfo is one memory kind's row in the table.
type KindInfo struct {
	Kind Kind
	// Name is the kind's name: Kind.String, the prefix of a Location
	// ("cuda:0"), a member of a Kinds list.
	Name string
	// Aliases are other names ParseLocation takes for it ("gpu", "cpu").
	Aliases []string
	// Driver reaches the kind's devices; nil for host memory, which the
	// CPU reaches itself.
	Driver Driver
}

// kinds is the table, indexed by Kind.
var kinds = [...]KindInfo{
	KindHost: {Kind: KindHost, Name: "host", Aliases: []string{"cpu"}},
	KindCUDA: {Kind: KindCUDA, Name: "cuda", Aliases: []string{"gpu"}, Driver: cudaDriver{}},
}

// KindTable returns the table of memory kinds, in the order of their Kind
// values.
func KindTable() []KindInfo { return slices.Clone(kinds[:]) }

// Info returns k's row, and false for a kind not in the table.
func (k Kind) Info() (KindInfo, bool) {
	if int(k) >= len(kinds) {
		return KindInfo{}, false
	}
	return kinds[k], true
}

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

// DeviceSet is one user's devices of every kind in the table, each opened
// on first use: what an engine keeps. The zero value is ready; it is safe
// for concurrent use.
type DeviceSet struct {
	mu   sync.Mutex
	sets [len(kinds)]Devices
}

// devices returns the set of kind k, made on first use.
func (s *DeviceSet) devices(k Kind) (Devices, error) {
	info, ok := k.Info()
	if !ok || info.Driver == nil {
		return nil, fmt.Errorf("%s memory has no device", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sets[k] == nil {
		s.sets[k] = info.Driver.Open()
	}
	return s.sets[k], nil
}

// Get returns the device of l, opening it on first use. Host memory has
// none.
func (s *DeviceSet) Get(l Location) (Device, error) {
	d, err := s.devices(l.Kind)
	if err != nil {
		return nil, err
	}
	return d.Get(l.Device)
}

// Opened lists the devices opened so far, by kind and then ordinal.
func (s *DeviceSet) Opened() []Location {
	s.mu.Lock()
	sets := s.sets
	s.mu.Unlock()
	var out []Location
	for k, d := range sets {
		if d == nil {
			continue
		}
		for _, n := range d.Opened() {
			out = append(out, Location{Kind: Kind(k), Device: n})
		}
	}
	return out
}

// Close closes every device; the set is usable again afterwards. Close
// the Regions of its devices first.
func (s *DeviceSet) Close() error {
	s.mu.Lock()
	sets := s.sets
	s.mu.Unlock()
	var errs []error
	for _, d := range sets {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}

// Locate says where memory at p lives as the device drivers see it: on a
// device of a kind in the table, else in host memory.
func Locate(p uintptr) Location {
	for _, info := range kinds {
		if info.Driver == nil {
			continue
		}
		if n, ok := info.Driver.Locate(p); ok {
			return Location{Kind: info.Kind, Device: n}
		}
	}
	return Host
}

// WrapDeviceRegion makes a Region of device memory that someone else
// allocated (a framework's tensor): size bytes at device address p. The
// driver of a kind in the table must know p as its memory; the Region
// takes its kind and device from the driver. The caller keeps ownership:
// Close frees nothing, and the memory must stay allocated until the Region
// is closed and no Buffer of it is in use.
func WrapDeviceRegion(p uintptr, size int) (*Region, error) {
	if p == 0 || size <= 0 {
		return nil, fmt.Errorf("wrap device memory %#x+%d: empty memory", p, size)
	}
	// The first error that is not ErrNotDevice says more (no driver)
	// than the kinds that do not know p.
	var first, notDevice error
	for _, info := range kinds {
		if info.Driver == nil {
			continue
		}
		r, err := info.Driver.Wrap(p, size)
		switch {
		case err == nil:
			return r, nil
		case !errors.Is(err, ErrNotDevice):
			first = cmp.Or(first, err)
		default:
			notDevice = err
		}
	}
	return nil, cmp.Or(first, notDevice, fmt.Errorf("wrap device memory %#x+%d: %w", p, size, ErrNotDevice))
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
