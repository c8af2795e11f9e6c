package xfer

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// stagingMB is the size of the pinned host memory through which an engine
// stages GPU memory for transports that move host memory only (tcp, and
// rdma without a NIC that reaches the GPU): pieces of stageChunk bytes,
// so up to 16 pieces in flight for all operations together.
const (
	stagingMB  = 64
	stageChunk = 4 << 20
)

// gpus is an engine's GPU state: the devices' contexts and idle streams,
// opened on first use, and the staging memory.
type gpus struct {
	mem.DeviceSet

	stagingOnce sync.Once
	staging     *mem.Pool
	stagingReg  *Region
	stagingErr  error
	// stagingMu guards staging and pinnedBy for Status, which reads them
	// from any goroutine.
	stagingMu sync.Mutex
	pinnedBy  mem.Device // the device that pinned the staging memory
}

// device returns GPU n, opening it (retaining its context) on first use.
func (e *Engine) device(n int) (mem.Device, error) { return e.gpu.Get(mem.CUDA(n)) }

// stagingPool is the pinned host memory that staged operations take their
// pieces from, registered with the engine (so that rdma can post from it)
// and with the driver (cuMemHostRegister, so that the GPU's copies run at
// full speed), made on first use.
func (e *Engine) stagingPool(dev mem.Location) (*mem.Pool, *Region, error) {
	g := &e.gpu
	g.stagingOnce.Do(func() {
		c, err := g.Get(dev)
		if err != nil {
			g.stagingErr = err
			return
		}
		mr, err := mem.NewRegion(mem.RegionOptions{Size: stagingMB << 20, HugePages: e.cfg.HugePages,
			Shared: e.cfg.sharedMemory(), Name: "xfer-staging"})
		if err != nil {
			g.stagingErr = fmt.Errorf("staging memory for GPU transfers: %w", err)
			return
		}
		if err := c.Pin(mr.Bytes()); err != nil {
			// Unpinned staging still works, at the speed of pageable
			// copies.
			e.log.Warn("staging memory for GPU transfers is not pinned: the GPU's copies run slower", "err", err)
		} else {
			g.stagingMu.Lock()
			g.pinnedBy = c
			g.stagingMu.Unlock()
		}
		r, err := e.regions.add(e, mr, AccessReadWrite, nil)
		if err != nil {
			g.unpin(mr.Bytes())
			mr.Close()
			g.stagingErr = err
			return
		}
		p, err := mem.NewPool(mr, mem.PoolOptions{})
		if err != nil {
			g.unpin(mr.Bytes())
			r.Close()
			g.stagingErr = err
			return
		}
		g.stagingMu.Lock()
		g.staging, g.stagingReg = p, r
		g.stagingMu.Unlock()
	})
	return g.staging, g.stagingReg, g.stagingErr
}

func (g *gpus) unpin(b []byte) error {
	g.stagingMu.Lock()
	c := g.pinnedBy
	g.pinnedBy = nil
	g.stagingMu.Unlock()
	if c == nil {
		return nil
	}
	return c.Unpin(b)
}

// closeStaging releases the staging memory; the engine calls it once its
// peers are closed, before it closes its other regions.
func (e *Engine) closeStaging() error {
	g := &e.gpu
	g.stagingOnce.Do(func() { g.stagingErr = ErrClosed })
	if g.staging == nil {
		return nil
	}
	return errors.Join(g.staging.Close(), g.unpin(g.stagingReg.Bytes()), g.stagingReg.Close())
}

// gpuStatus is the GPU part of Status, or nil before the engine used a
// GPU.
func (e *Engine) gpuStatus() *GPUStatus {
	var devs []int
	for _, l := range e.gpu.Opened() {
		if l.Kind == mem.KindCUDA {
			devs = append(devs, l.Device)
		}
	}
	if len(devs) == 0 {
		return nil
	}
	s := &GPUStatus{Devices: devs}
	g := &e.gpu
	g.stagingMu.Lock()
	defer g.stagingMu.Unlock()
	if g.staging != nil {
		st := g.staging.Stats()
		s.StagingBytes, s.StagingUsedBytes, s.StagingPinned = st.Capacity, st.InUse, g.pinnedBy != nil
	}
	return s
}

// closeGPU releases the streams and the contexts; the engine calls it
// once every region is closed (device memory is freed in its context).
func (e *Engine) closeGPU() error { return e.gpu.Close() }

// NewDeviceRegion allocates size bytes of memory on GPU n (cuMemAlloc) and
// registers them with the given rights. Its Bytes are device addresses:
// pass them to operations, never read or write them with the CPU. Every
// transport moves device memory: shm with the GPU's copy engines, the
// others through pinned host staging buffers (docs/GPU.md).
func (e *Engine) NewDeviceRegion(n, size int, access Access) (*Region, error) {
	c, err := e.device(n)
	if err != nil {
		return nil, fmt.Errorf("new region on cuda:%d: %w", n, err)
	}
	mr, err := c.Alloc(size)
	if err != nil {
		return nil, err
	}
	return e.adopt(mr, access)
}

// newDevicePool allocates the default pool's memory on GPU n.
func (e *Engine) newDevicePool(n, size int) (*mem.Region, error) {
	c, err := e.device(n)
	if err != nil {
		return nil, err
	}
	return c.Alloc(size)
}

// RegisterDevice registers size bytes of GPU memory at device address p
// that someone else allocated (a framework's tensor: PyTorch's
// tensor.data_ptr()). The driver tells which GPU it is on. Closing the
// region deregisters it and leaves the memory to the caller, who must keep
// it allocated until then.
func (e *Engine) RegisterDevice(p uintptr, size int, access Access) (*Region, error) {
	mr, err := mem.WrapDeviceRegion(p, size)
	if err != nil {
		return nil, err
	}
	if _, err := e.gpu.Get(mr.Location()); err != nil {
		return nil, fmt.Errorf("register device memory on %s: %w", mr.Location(), err)
	}
	return e.regions.add(e, mr, access, nil)
}

// staging reports whether op, posted with its local region pinned, must
// be staged through host memory: its local memory is on a GPU and ep does
// not move it itself, because its transport does not move that kind of
// memory (the table's caps) or cannot move this operation now (its
// DeviceMover says no: no DMA-BUF, the peer's GPU out of reach).
func (e *Engine) staging(ep transport.Endpoint, op *transport.Op) bool {
	loc := op.Region.Location()
	if loc.IsHost() {
		return false
	}
	if !e.caps(ep.Transport()).Memory.Has(loc.Kind) {
		return true
	}
	m, ok := ep.(transport.DeviceMover)
	return !ok || !m.MovesDevice(op)
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// staged is a host copy of part of a device region, handed to a transport
// as a remote access's memory (transport.Resolved.Staged).
type staged struct {
	ctx    mem.Device
	dev    uintptr // the device bytes it stands for
	buf    []byte
	pooled mem.Buffer  // the piece of staging memory, or
	temp   *mem.Region // memory of its own when the staging pool is full
}

func (s *staged) Commit() error {
	if err := s.ctx.Copy(s.dev, addrOf(s.buf), len(s.buf)); err != nil {
		return fmt.Errorf("write of %d bytes into GPU memory: %w", len(s.buf), err)
	}
	return nil
}

func (s *staged) Release() {
	if s.temp != nil {
		s.temp.Close()
		return
	}
	if !s.pooled.IsZero() {
		s.pooled.Pool().Free(s.pooled)
	}
}

// stageRemote makes the host copy that stands for n bytes at offset off of
// device region h, for a peer's access: a READ's copy holds the device's
// bytes already. It never waits for staging memory: when the pool is full
// the copy gets memory of its own.
func (e *Engine) stageRemote(h *mem.Handle, off, n uint64, want Access) (*staged, error) {
	dev := h.Location()
	c, err := e.gpu.Get(dev)
	if err != nil {
		return nil, err
	}
	s := &staged{ctx: c, dev: uintptr(h.Base() + off)}
	if pool, _, err := e.stagingPool(dev); err == nil && n <= uint64(pool.Region().Len()) {
		if b, err := pool.Alloc(int(n)); err == nil {
			s.pooled, s.buf = b, b.Bytes()
		}
	}
	if s.buf == nil {
		size := int(max(n, 1))
		r, err := mem.NewRegion(mem.RegionOptions{Size: size})
		if err != nil {
			return nil, fmt.Errorf("staging %d bytes of GPU memory: %w", n, err)
		}
		s.temp, s.buf = r, r.Bytes()[:n]
	}
	if want&AccessRead != 0 && n > 0 {
		if err := c.Copy(addrOf(s.buf), s.dev, int(n)); err != nil {
			s.Release()
			return nil, fmt.Errorf("read of %d bytes from GPU memory: %w", n, err)
		}
	}
	return s, nil
}

// Copy copies src to dst, either of which may be GPU memory registered
// with e (a region's or a Buffer's Bytes) and the other any host memory:
// the way to fill GPU memory from the CPU, or to look at it. Both must be
// of one length. Host to host it is copy.
func (e *Engine) Copy(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("copy: %d bytes into %d", len(src), len(dst))
	}
	dl, sl := e.locate(dst), e.locate(src)
	if dl.IsHost() && sl.IsHost() {
		copy(dst, src)
		return nil
	}
	if len(src) == 0 {
		return nil
	}
	dev := dl
	if dl.IsHost() {
		dev = sl
	}
	c, err := e.gpu.Get(dev)
	if err != nil {
		return fmt.Errorf("copy %d bytes from %s to %s memory: %w", len(src), sl, dl, err)
	}
	if err := c.Copy(addrOf(dst), addrOf(src), len(src)); err != nil {
		return fmt.Errorf("copy %d bytes from %s to %s memory: %w", len(src), sl, dl, err)
	}
	return nil
}

// locate says where b lives: in a region registered with e, or, for memory
// e does not know, where the driver says (GPU memory of another engine or
// of a framework), else in host memory.
func (e *Engine) locate(b []byte) mem.Location {
	if r := e.regions.find(b); r != nil {
		return r.h.Location()
	}
	if len(b) == 0 {
		return mem.Host
	}
	return mem.Locate(addrOf(b))
}
