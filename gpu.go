package xfer

import (
	"fmt"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stage"
)

// stager returns the engine's staging, made on first use: its memory is
// made by the first staged operation, registered as a region of e.
func (e *Engine) stager() stager {
	e.gpu.once.Do(func() {
		e.gpu.stage = stage.New(stage.Config{
			Devices: &e.gpu.DeviceSet,
			Memory:  mem.RegionOptions{HugePages: e.cfg.HugePages, Shared: e.cfg.sharedMemory()},
			Register: func(mr *mem.Region) (*mem.Handle, func() error, error) {
				r, err := e.addRegion(mr, AccessReadWrite, nil)
				if err != nil {
					return nil, nil, err
				}
				return r.h, r.Close, nil
			},
			Log:     e.log,
			Context: e.ctx,
		})
	})
	return e.gpu.stage
}

// device returns GPU n, opening it (retaining its context) on first use.
func (e *Engine) device(n int) (mem.Device, error) { return e.gpu.Get(mem.CUDA(n)) }

// closeStaging releases the staging memory; the engine calls it once its
// peers are closed, before it closes its other regions.
func (e *Engine) closeStaging() error { return e.stager().Close() }

// closeGPU closes the devices (a GPU's streams and context); the engine
// calls it once every region is closed (device memory is freed through its
// device).
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
	return e.addRegion(mr, access, nil)
}

// staging reports whether op, posted with its local region pinned, must
// be staged through host memory (stage.Needed, with the kinds of memory
// the transport table says ep's transport moves).
func (e *Engine) staging(ep transport.Endpoint, op *transport.Op) bool {
	return stage.Needed(e.caps(ep.Transport()).Memory, ep, op)
}

// postStaged runs op, whose local memory is on a device, over ep, which
// moves host memory only (stage.Stager.Post).
func (e *Engine) postStaged(ep transport.Endpoint, op *transport.Op) { e.stager().Post(ep, op) }

// stageRemote makes the host copy that stands for n bytes at offset off of
// device region h, for a peer's access (stage.Stager.Remote).
func (e *Engine) stageRemote(h *mem.Handle, off, n uint64, want Access) ([]byte, transport.Staging, error) {
	return e.stager().Remote(h, off, n, want&AccessRead != 0)
}

// Copy copies src to dst, either of which may be GPU memory registered
// with e (a region's or a Buffer's Bytes) and the other any host memory:
// the way to fill GPU memory from the CPU, or to look at it. Both must be
// of one length. Host to host it is copy.
func (e *Engine) Copy(dst, src []byte) error { return e.gpu.Copy(dst, src, e.locate) }

// locate says where b lives: in a region registered with e, or, for memory
// e does not know, where the driver says (GPU memory of another engine or
// of a framework), else in host memory.
func (e *Engine) locate(b []byte) mem.Location {
	if r, _, ok := e.regions.Find(b); ok {
		return r.h.Location()
	}
	return mem.LocateBytes(b)
}

// resolve implements transport.Host.Resolve for the engine. A peer's
// access to device memory gets a host copy that stands for it
// (transport.Resolved.Staged).
func (e *Engine) resolve(id uint32, key, addr, n uint64, want Access) (transport.Resolved, error) {
	res, err := e.regions.Check(id, key, addr, n, want)
	if err != nil || res.Region.Location().IsHost() {
		return res, err
	}
	buf, s, err := e.stageRemote(res.Region, addr-res.Region.Base(), n, want)
	if err != nil {
		res.Release()
		return transport.Resolved{}, err
	}
	res.Mem, res.Staged = buf, s
	return res, nil
}
