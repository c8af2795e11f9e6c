//go:build cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"
)

// MW is a memory window of type 2 (struct ibv_mw): a second rkey over a
// sub-range of an MR, with its own rights, that a QP binds and invalidates
// with work requests ([QP.PostBindMW], [QP.PostLocalInv]). Until it is
// bound its rkey reaches nothing.
type MW struct {
	c  *C.struct_ibv_mw
	pd *PD
}

// AllocMW allocates a type 2 memory window. A provider without windows
// fails with an error that wraps [ErrNotSupported]; [DeviceInfo.MemWindows]
// tells beforehand.
func (pd *PD) AllocMW() (*MW, error) {
	if pd == nil || pd.c == nil {
		return nil, ErrClosed
	}
	m, err := C.xibv_alloc_mw(pd.c)
	if m == nil {
		e := errnoErr(err, syscall.EOPNOTSUPP)
		if e == syscall.EOPNOTSUPP || e == syscall.ENOSYS || e == syscall.EPROTONOSUPPORT {
			return nil, fmt.Errorf("ibv_alloc_mw on %s: %w (%w)", pd.ctx.name, ErrNotSupported, e)
		}
		return nil, fmt.Errorf("ibv_alloc_mw on %s: %w", pd.ctx.name, e)
	}
	live.mws.Add(1)
	pd.children.Add(1)
	return &MW{c: m, pd: pd}, nil
}

// RKey is the window's current rkey: the one its last bind gave it.
func (mw *MW) RKey() uint32 {
	if mw == nil || mw.c == nil {
		return 0
	}
	return uint32(mw.c.rkey)
}

// Close frees the window; the NIC refuses its rkey from then on.
func (mw *MW) Close() error {
	if mw == nil || mw.c == nil {
		return nil
	}
	rc, err := C.xibv_dealloc_mw(mw.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_dealloc_mw on %s: %w", mw.pd.ctx.name, e)
	}
	mw.c = nil
	live.mws.Add(-1)
	mw.pd.children.Add(-1)
	return nil
}

// incRKey is ibv_inc_rkey: the rkey with its low byte (the key the
// consumer owns) advanced, so that a bind gives the window a new rkey and
// the old one stays refused.
func incRKey(rkey uint32) uint32 {
	return rkey&^0xff | (rkey+1)&0xff
}

// PostBindMW posts a signaled IBV_WR_BIND_MW that binds mw to n bytes at
// addr of mr (an MR registered with [AccessMWBind]) with the rights
// access (remote read, remote write), and returns the rkey the window has
// once the bind completes (a completion with id and [WCBindMW]). A type 2
// window must be unbound (new, or invalidated) to be bound. The QP must be
// in RTS and belong to the window's PD.
func (qp *QP) PostBindMW(id uint64, mw *MW, mr *MR, addr uintptr, n int, access Access) (uint32, error) {
	if qp == nil || qp.c == nil || mw == nil || mw.c == nil || mr == nil || mr.c == nil {
		return 0, ErrClosed
	}
	if n <= 0 || addr < mr.Addr || uint64(addr-mr.Addr)+uint64(n) > uint64(mr.Len) {
		return 0, fmt.Errorf("bind a window over %#x+%d of the MR %#x+%d on %s: %w", addr, n, mr.Addr, mr.Len, qp.obj, syscall.EINVAL)
	}
	rkey := incRKey(uint32(mw.c.rkey))
	rc := C.xibv_post_bind_mw(qp.c, C.uint64_t(id), C.uint(FlagSignaled), mw.c, C.uint32_t(rkey), mr.c,
		C.uint64_t(addr), C.uint64_t(n), C.uint(access))
	if rc != 0 {
		return 0, &PostError{Op: "ibv_post_send (bind window)", Object: qp.obj, N: 1, Bad: 0, BadID: id, Err: syscall.Errno(rc)}
	}
	// As ibv_bind_mw does for type 1: the window's rkey is the bound one.
	mw.c.rkey = C.uint32_t(rkey)
	return rkey, nil
}

// PostLocalInv posts a signaled IBV_WR_LOCAL_INV of rkey (a window's):
// once its completion (id, [WCLocalInv]) arrives, the NIC refuses the
// rkey, and the window may be bound again.
func (qp *QP) PostLocalInv(id uint64, rkey uint32) error {
	if qp == nil || qp.c == nil {
		return ErrClosed
	}
	rc := C.xibv_post_local_inv(qp.c, C.uint64_t(id), C.uint(FlagSignaled), C.uint32_t(rkey))
	if rc != 0 {
		return &PostError{Op: "ibv_post_send (invalidate)", Object: qp.obj, N: 1, Bad: 0, BadID: id, Err: syscall.Errno(rc)}
	}
	return nil
}
