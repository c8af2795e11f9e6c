package shm

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// GPU memory over shm
//
// A GPU region's owner answers an attach with a CUDA IPC handle of the
// allocation that holds the region (cuIpcGetMemHandle). The initiator
// opens it once (cuIpcOpenMemHandle) and from then on moves the bytes
// itself with the GPU's copy engines, on a stream of its own, synchronised
// before the operation completes: device to device, host to device or
// device to host, whichever the two sides' memory is. Between engines of
// one process the device address needs no handle. Where the owner cannot
// make a handle, or this process cannot open it, the attachment records
// that, and the region is reached through the stream, which the owner
// stages through host memory.

// gpuState is the shm transport's device state, shared by its endpoints:
// its devices (mem's table of memory kinds: contexts and idle streams),
// and the IPC handles opened.
type gpuState struct {
	devs mem.DeviceSet

	mu     sync.Mutex
	opened map[ipcKey]*ipcOpen
}

type ipcKey struct {
	pid    uint32
	handle mem.IPCHandle
}

// ipcOpen is an allocation of another process opened in this one,
// counted by the attachments that use it: CUDA maps one handle once per
// process.
type ipcOpen struct {
	dev  mem.Device
	x    mem.IPCExporter // dev, which opened it
	base uintptr
	refs int
}

// available reports whether this process can use memory of kind k.
func (g *gpuState) available(k mem.Kind) error {
	info, ok := k.Info()
	if !ok || info.Driver == nil {
		return fmt.Errorf("shm: %s memory has no device", k)
	}
	return info.Driver.Available()
}

// device returns the device of l, opened on first use.
func (g *gpuState) device(l mem.Location) (mem.Device, error) {
	if err := g.available(l.Kind); err != nil {
		return nil, err
	}
	return g.devs.Get(l)
}

// ipc returns the device of l, which must export its memory by IPC
// handles.
func (g *gpuState) ipc(l mem.Location) (mem.Device, mem.IPCExporter, error) {
	d, err := g.device(l)
	if err != nil {
		return nil, nil, err
	}
	x, ok := d.(mem.IPCExporter)
	if !ok {
		return nil, nil, fmt.Errorf("shm: %s memory has no IPC handles", l.Kind)
	}
	return d, x, nil
}

// open maps the allocation of process pid that handle names.
func (g *gpuState) open(pid uint32, l mem.Location, handle mem.IPCHandle) (*ipcOpen, error) {
	d, x, err := g.ipc(l)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := ipcKey{pid, handle}
	if o := g.opened[k]; o != nil {
		o.refs++
		return o, nil
	}
	p, err := x.OpenIPC(handle)
	if err != nil {
		return nil, err
	}
	if g.opened == nil {
		g.opened = map[ipcKey]*ipcOpen{}
	}
	o := &ipcOpen{dev: d, x: x, base: p, refs: 1}
	g.opened[k] = o
	return o, nil
}

// close drops one use of o, unmapping it with the last.
func (g *gpuState) close(o *ipcOpen) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o.refs--
	if o.refs > 0 {
		return
	}
	for k, v := range g.opened {
		if v == o {
			delete(g.opened, k)
		}
	}
	o.x.CloseIPC(o.base)
}

// release closes the devices (streams and contexts); Transport.Close
// calls it once the endpoints are closed.
func (g *gpuState) release() error { return g.devs.Close() }

// exportDevice completes the answer to a peer that attaches a GPU region:
// the IPC handle of its allocation. Where there is none to give, the
// answer goes without, and the peer reaches the region through the stream.
func (t *Transport) exportDevice(_ transport.Resolved, info *wire.AttachInfo) error {
	if info.Kind == 0 {
		return nil
	}
	_, x, err := t.gpu.ipc(mem.Location{Kind: mem.Kind(info.Kind), Device: int(info.Device)})
	if err != nil {
		return nil
	}
	h, base, err := x.IPCHandle(uintptr(info.Base))
	if err != nil {
		return nil
	}
	info.IPC, info.IPCOffset = h, info.Base-uint64(base)
	return nil
}

// attachDevice makes the GPU region of info reachable from this process:
// its device address here, through its IPC handle (or as it is, between
// engines of one process). It leaves a without one when that cannot be
// done, and the region takes the stream path.
func (e *Endpoint) attachDevice(a *attachment, info wire.AttachInfo) {
	loc := mem.Location{Kind: mem.Kind(info.Kind), Device: int(info.Device)}
	if loc.IsHost() || e.t.gpu.available(loc.Kind) != nil {
		return
	}
	if int(info.PID) == os.Getpid() {
		c, err := e.t.gpu.device(loc)
		if err != nil {
			return
		}
		a.dev, a.ctx = uintptr(info.Base), c
		return
	}
	if info.IPC == ([64]byte{}) {
		return
	}
	o, err := e.t.gpu.open(info.PID, loc, info.IPC)
	if err != nil {
		e.log.Debug("shm: cannot open the peer's GPU memory; it goes through the stream", "region_base", info.Base, "err", err)
		return
	}
	a.dev, a.ctx, a.ipc = o.base+uintptr(info.IPCOffset), o.dev, o
}

// MovesDevice implements transport.DeviceMover: an operation on local GPU
// memory is a copy when its remote region is attached, in host memory
// (mapped) or in GPU memory (opened). Otherwise the region is attached in
// the background, and this operation is staged by the engine.
func (e *Endpoint) MovesDevice(op *transport.Op) bool {
	switch op.Kind {
	case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
	default:
		return false
	}
	if op.Region == nil || e.t.gpu.available(op.Region.Location().Kind) != nil {
		return false
	}
	want := transport.AccessWrite
	if op.Kind == transport.OpRead {
		want = transport.AccessRead
	}
	e.mu.Lock()
	a := e.att[op.Remote.Region]
	attach := a == nil || a.rights&want != want || a.key != op.Remote.Key
	ok := !attach && (a.mem != nil || a.dev != 0)
	closed := e.closed
	e.mu.Unlock()
	if attach && !closed {
		e.attachLater(op.Remote.Region, op.Remote.Key, want)
	}
	return ok
}

// onDevice reports whether op's local memory is a GPU's.
func onDevice(op *transport.Op) bool {
	return op.Region != nil && !op.Region.Location().IsHost()
}

// copyDevice performs op, n bytes at offset off of attachment a, where
// either side is GPU memory.
func (e *Endpoint) copyDevice(op *transport.Op, a *attachment, off, n uint64) error {
	if n == 0 {
		return nil
	}
	local := uintptr(unsafe.Pointer(unsafe.SliceData(op.Local)))
	var remote uintptr
	if a.dev != 0 {
		remote = a.dev + uintptr(off)
	} else {
		remote = uintptr(unsafe.Pointer(&a.mem[off]))
	}
	c := a.ctx
	if onDevice(op) {
		var err error
		if c, err = e.t.gpu.device(op.Region.Location()); err != nil {
			return fmt.Errorf("shm %s of %d bytes: %w", op.Kind, n, err)
		}
	}
	dst, src := remote, local
	if op.Kind == transport.OpRead {
		dst, src = local, remote
	}
	if err := streamCopy(c, dst, src, int(n)); err != nil {
		return fmt.Errorf("shm %s of %d bytes: %w", op.Kind, n, err)
	}
	return nil
}

// streamCopy copies n bytes from src to dst on an idle stream of d, and
// waits for it.
func streamCopy(d mem.Device, dst, src uintptr, n int) error {
	st, err := d.Stream()
	if err != nil {
		return err
	}
	err = st.CopyAsync(dst, src, n)
	if err == nil {
		err = st.Sync()
	}
	st.Release()
	return err
}
