//go:build cgo

package ibv

/*
#cgo noescape xibv_post_srq_recv
#cgo nocallback xibv_post_srq_recv
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"syscall"
	"unsafe"
)

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	c      *C.struct_ibv_srq
	pd     *PD
	ring   *C.struct_xibv_ring
	maxWR  int
	maxSGE int
	obj    string
}

// CreateSRQ creates a shared receive queue for maxWR receives (default 256)
// of maxSGE elements (default 1).
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if pd == nil || pd.c == nil {
		return nil, ErrClosed
	}
	if maxWR <= 0 {
		maxWR = 256
	}
	if maxSGE <= 0 {
		maxSGE = 1
	}
	var at C.struct_ibv_srq_init_attr
	at.attr.max_wr = C.uint32_t(min(maxWR, math.MaxInt32))
	at.attr.max_sge = C.uint32_t(min(maxSGE, math.MaxInt32))
	s, err := C.xibv_create_srq(pd.c, &at)
	if s == nil {
		return nil, fmt.Errorf("ibv_create_srq %d WRs on %s: %w", maxWR, pd.ctx.name, errnoErr(err, syscall.EINVAL))
	}
	srq := &SRQ{c: s, pd: pd, maxWR: int(at.attr.max_wr), maxSGE: int(at.attr.max_sge), obj: "SRQ on " + pd.ctx.name}
	r, err := C.xibv_ring_new(0, C.int(min(max(srq.maxWR, 1), maxPostBatch)))
	if r == nil {
		C.xibv_destroy_srq(s)
		return nil, fmt.Errorf("allocate the WR ring of %s: %w", srq.obj, errnoErr(err, syscall.ENOMEM))
	}
	srq.ring = r
	live.srqs.Add(1)
	pd.children.Add(1)
	return srq, nil
}

// MaxWR returns the number of receives the SRQ was granted.
func (srq *SRQ) MaxWR() int {
	if srq == nil {
		return 0
	}
	return srq.maxWR
}

// PostRecv posts wrs to the SRQ in one cgo call. On failure the error is a
// [*PostError] that tells how many were posted.
func (srq *SRQ) PostRecv(wrs []RecvWR) error {
	if srq == nil || srq.c == nil {
		return ErrClosed
	}
	n := len(wrs)
	if n == 0 {
		return nil
	}
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	rc := C.xibv_post_srq_recv(handle(unsafe.Pointer(srq.c)), handle(unsafe.Pointer(srq.ring)), (*C.struct_xfer_recv_wr)(unsafe.Pointer(&wrs[0])), C.int(n))
	if rc != 0 {
		e := ringError("ibv_post_srq_recv", srq.obj, srq.ring, rc, n)
		if e.Bad >= 0 {
			e.BadID = wrs[e.Bad].ID
		}
		return e
	}
	return nil
}

// Close destroys the SRQ. It fails while QPs use it.
func (srq *SRQ) Close() error {
	if srq == nil || srq.c == nil {
		return nil
	}
	rc, err := C.xibv_destroy_srq(srq.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_destroy_srq on %s: %w", srq.pd.ctx.name, e)
	}
	C.xibv_ring_free(srq.ring)
	srq.c, srq.ring = nil, nil
	live.srqs.Add(-1)
	srq.pd.children.Add(-1)
	return nil
}
