package shm

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/internal/cuda"
	"github.com/xferio/xfer/internal/wire"
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

// gpuState is the shm transport's CUDA state, shared by its endpoints: the
// devices' contexts and idle streams, and the IPC handles opened.
type gpuState struct {
	ctxs cuda.Contexts
	once sync.Once
	err  error // why CUDA cannot be used here, or nil

	mu     sync.Mutex
	opened map[ipcKey]*ipcOpen
}

type ipcKey struct {
	pid    uint32
	handle cuda.IPCHandle
}

// ipcOpen is an allocation of another process opened in this one,
// counted by the attachments that use it: CUDA maps one handle once per
// process.
type ipcOpen struct {
	ctx  *cuda.Context
	base uintptr
	refs int
}

// available reports whether this process can use CUDA.
func (g *gpuState) available() error {
	g.once.Do(func() { g.err = cuda.Load() })
	return g.err
}

// context returns GPU n's context, retained on first use.
func (g *gpuState) context(n int) (*cuda.Context, error) {
	if err := g.available(); err != nil {
		return nil, err
	}
	return g.ctxs.Get(n)
}

// open maps the allocation of process pid that handle names.
func (g *gpuState) open(pid uint32, device int, handle cuda.IPCHandle) (*ipcOpen, error) {
	c, err := g.context(device)
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
	p, err := c.OpenIPC(handle)
	if err != nil {
		return nil, err
	}
	if g.opened == nil {
		g.opened = map[ipcKey]*ipcOpen{}
	}
	o := &ipcOpen{ctx: c, base: p, refs: 1}
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
	o.ctx.CloseIPC(o.base)
}

// release frees the streams and the contexts; Transport.Close calls it
// once the endpoints are closed.
func (g *gpuState) release() error { return g.ctxs.Close() }

// exportDevice completes the answer to a peer that attaches a GPU region:
// the IPC handle of its allocation. Where there is none to give, the
// answer goes without, and the peer reaches the region through the stream.
func (t *Transport) exportDevice(_ transport.Resolved, info *wire.AttachInfo) error {
	if info.Kind == 0 {
		return nil
	}
	c, err := t.gpu.context(int(info.Device))
	if err != nil {
		return nil
	}
	base, _, err := c.AddressRange(uintptr(info.Base))
	if err != nil {
		return nil
	}
	h, err := c.IPCHandle(base)
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
	if info.Kind != 1 || e.t.gpu.available() != nil {
		return
	}
	dev := int(info.Device)
	if int(info.PID) == os.Getpid() {
		c, err := e.t.gpu.context(dev)
		if err != nil {
			return
		}
		a.dev, a.ctx = uintptr(info.Base), c
		return
	}
	if info.IPC == (cuda.IPCHandle{}) {
		return
	}
	o, err := e.t.gpu.open(info.PID, dev, info.IPC)
	if err != nil {
		e.log.Debug("shm: cannot open the peer's GPU memory; it goes through the stream", "region_base", info.Base, "err", err)
		return
	}
	a.dev, a.ctx, a.ipc = o.base+uintptr(info.IPCOffset), o.ctx, o
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
	if e.t.gpu.available() != nil {
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
		if c, err = e.t.gpu.context(op.Region.Location().Device); err != nil {
			return fmt.Errorf("shm %s of %d bytes: %w", op.Kind, n, err)
		}
	}
	dst, src := remote, local
	if op.Kind == transport.OpRead {
		dst, src = local, remote
	}
	if err := e.t.gpu.ctxs.Copy(c, dst, src, int(n)); err != nil {
		return fmt.Errorf("shm %s of %d bytes: %w", op.Kind, n, err)
	}
	return nil
}
