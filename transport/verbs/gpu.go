package verbs

import (
	"fmt"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// GPU memory on rdma
//
// A GPU region that peers reach one-sidedly must be registered with the
// NIC, which then reads and writes GPU memory itself (GPUDirect RDMA). The
// device tries, in order:
//   - a DMA-BUF of the allocation that holds the region
//     (cuMemGetHandleForAddressRange), registered with ibv_reg_dmabuf_mr:
//     NVIDIA's open kernel modules and a NIC driver that maps DMA-BUFs;
//   - the device address, registered with ibv_reg_mr: this works where
//     nvidia-peermem is loaded;
// and otherwise fails with an error that says what each attempt said.
// Local operations on GPU memory do not come here: the engine stages them
// through host memory (an rdma endpoint does not move device memory
// itself, so that no inline send or CPU copy ever reads it). How the last
// GPU region was registered shows in DeviceInUse.GPUMemory.

const (
	gpuByDMABuf  = "DMA-BUF (ibv_reg_dmabuf_mr)"
	gpuByAddress = "by address (ibv_reg_mr: nvidia-peermem)"
)

// regDevice registers GPU region h. It returns the MR and, for a DMA-BUF
// registration, the DMA-BUF's descriptor, which must stay open until the
// MR is closed (else -1).
func (d *device) regDevice(h *mem.Handle, access ibv.Access) (*ibv.MR, int, error) {
	loc := h.Location()
	c, err := d.gpu.Get(loc)
	if err != nil {
		return nil, -1, fmt.Errorf("rdma: region %d is %s memory: %w", h.ID(), loc, err)
	}
	var viaDMABuf error
	x, ok := c.(mem.DMABufExporter)
	if !ok {
		err = fmt.Errorf("%s memory has no DMA-BUF export", loc.Kind)
	} else if fd, base, xerr := x.DMABuf(uintptr(h.Base())); xerr != nil {
		err = xerr
	} else {
		var mr *ibv.MR
		if mr, err = d.pd.RegDmabufMR(h.Base()-uint64(base), int(h.Len()), h.Base(), fd, access); err == nil {
			d.gpuPath(gpuByDMABuf)
			return mr, fd, nil
		}
		sys.Close(fd)
	}
	viaDMABuf = err
	mr, err := d.pd.RegMR(h.Bytes(), access)
	if err == nil {
		d.gpuPath(gpuByAddress)
		return mr, -1, nil
	}
	d.gpuPath("none: peers reach GPU regions over tcp or shm")
	return nil, -1, fmt.Errorf("rdma: region %d is %s memory, which %s cannot register: as a DMA-BUF: %v; by address (needs nvidia-peermem): %v: %w",
		h.ID(), loc, d.info.Name, viaDMABuf, err, transport.ErrNotSupported)
}

// gpuPath records how GPU memory was last registered, for DeviceInUse,
// and logs each way the first time it is taken.
func (d *device) gpuPath(how string) {
	d.gpuMu.Lock()
	first := !d.gpuSeen[how]
	if first {
		if d.gpuSeen == nil {
			d.gpuSeen = map[string]bool{}
		}
		d.gpuSeen[how] = true
	}
	d.gpuHow = how
	d.gpuMu.Unlock()
	if first && d.log != nil {
		d.log.Info("rdma: how this device registers GPU memory with the NIC", "device", d.info.Name, "how", how)
	}
}

// gpuMemory is how GPU memory was last registered, or "" before any.
func (d *device) gpuMemory() string {
	d.gpuMu.Lock()
	defer d.gpuMu.Unlock()
	return d.gpuHow
}
