//go:build cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/xferio/xfer/bytesize"
)

// PD is a protection domain (struct ibv_pd).
type PD struct {
	c        *C.struct_ibv_pd
	ctx      *Context
	children atomic.Int64 // open MRs, QPs and SRQs
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if c == nil || c.c == nil {
		return nil, ErrClosed
	}
	p, err := C.xibv_alloc_pd(c.c)
	if p == nil {
		return nil, fmt.Errorf("ibv_alloc_pd on %s: %w", c.name, errnoErr(err, syscall.ENOMEM))
	}
	live.pds.Add(1)
	c.children.Add(1)
	return &PD{c: p, ctx: c}, nil
}

// Context returns the device the PD belongs to.
func (pd *PD) Context() *Context {
	if pd == nil {
		return nil
	}
	return pd.ctx
}

// Close frees the PD. It fails, and the PD stays open, while MRs, QPs or
// SRQs made from it are open.
func (pd *PD) Close() error {
	if pd == nil || pd.c == nil {
		return nil
	}
	if n := pd.children.Load(); n > 0 {
		return fmt.Errorf("ibv_dealloc_pd on %s: %d MRs, QPs or SRQs are still open: %w", pd.ctx.name, n, syscall.EBUSY)
	}
	rc, err := C.xibv_dealloc_pd(pd.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_dealloc_pd on %s: %w", pd.ctx.name, e)
	}
	pd.c = nil
	live.pds.Add(-1)
	pd.ctx.children.Add(-1)
	return nil
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	LKey uint32  // for local SGEs
	RKey uint32  // for the peer's RDMA READ and WRITE
	Addr uintptr // the first registered byte
	Len  int     // the registered length in bytes

	c  *C.struct_ibv_mr
	pd *PD
}

// RegMR registers b with the NIC, granting access.
//
// b must not be Go heap memory: the NIC reads and writes it without the Go
// runtime knowing, and it must stay put until the MR is closed. Map it with
// mmap (internal/sys.MmapAnon, or memory the mem package hands out) and
// unmap it only after Close.
func (pd *PD) RegMR(b []byte, access Access) (*MR, error) {
	if pd == nil || pd.c == nil {
		return nil, ErrClosed
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("ibv_reg_mr 0 bytes on %s: %w", pd.ctx.name, syscall.EINVAL)
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m, err := C.xibv_reg_mr(pd.c, C.uintptr_t(addr), C.size_t(len(b)), C.int(access))
	runtime.KeepAlive(b)
	if m == nil {
		e := errnoErr(err, syscall.EINVAL)
		hint := ""
		if e == syscall.ENOMEM || e == syscall.EPERM || e == syscall.EAGAIN {
			hint = " (is RLIMIT_MEMLOCK too low? see `ulimit -l`)"
		}
		return nil, fmt.Errorf("ibv_reg_mr %s on %s%s: %w", bytesize.Human(int64(len(b))), pd.ctx.name, hint, e)
	}
	live.mrs.Add(1)
	pd.children.Add(1)
	return &MR{
		LKey: uint32(m.lkey),
		RKey: uint32(m.rkey),
		Addr: addr,
		Len:  len(b),
		c:    m,
		pd:   pd,
	}, nil
}

// RegDmabufMR registers length bytes at offset of the DMA-BUF fd (GPU
// memory that a driver exports, or a udmabuf of host memory) with
// ibv_reg_dmabuf_mr. The MR is addressed at iova: its SGEs and the
// peer's remote addresses use iova+off, as they use the address of memory
// registered with RegMR. The caller keeps fd open until Close. A library
// without the call (rdma-core before 34) fails with ENOSYS, a device that
// cannot map DMA-BUFs with the kernel's error (EOPNOTSUPP, EINVAL); both
// wrap ErrNotSupported.
func (pd *PD) RegDmabufMR(offset uint64, length int, iova uint64, fd int, access Access) (*MR, error) {
	if pd == nil || pd.c == nil {
		return nil, ErrClosed
	}
	if length <= 0 || fd < 0 {
		return nil, fmt.Errorf("ibv_reg_dmabuf_mr %d bytes of fd %d on %s: %w", length, fd, pd.ctx.name, syscall.EINVAL)
	}
	m, err := C.xibv_reg_dmabuf_mr(pd.c, C.uint64_t(offset), C.size_t(length), C.uint64_t(iova), C.int(fd), C.int(access))
	if m == nil {
		e := errnoErr(err, syscall.EINVAL)
		if e == syscall.ENOSYS || e == syscall.EOPNOTSUPP || e == syscall.EPROTONOSUPPORT {
			return nil, fmt.Errorf("ibv_reg_dmabuf_mr %s on %s: %w (%w)", bytesize.Human(int64(length)), pd.ctx.name, ErrNotSupported, e)
		}
		return nil, fmt.Errorf("ibv_reg_dmabuf_mr %s on %s: %w", bytesize.Human(int64(length)), pd.ctx.name, e)
	}
	live.mrs.Add(1)
	pd.children.Add(1)
	return &MR{LKey: uint32(m.lkey), RKey: uint32(m.rkey), Addr: uintptr(iova), Len: length, c: m, pd: pd}, nil
}

// SGE returns the scatter/gather element for n bytes at offset off in the MR.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: uint64(mr.Addr) + uint64(off), Len: uint32(n), LKey: mr.LKey}
}

// Close deregisters the MR. Unmap the memory only afterwards.
func (mr *MR) Close() error {
	if mr == nil || mr.c == nil {
		return nil
	}
	rc, err := C.xibv_dereg_mr(mr.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_dereg_mr %s on %s: %w", bytesize.Human(int64(mr.Len)), mr.pd.ctx.name, e)
	}
	mr.c = nil
	live.mrs.Add(-1)
	mr.pd.children.Add(-1)
	return nil
}
