//go:build cgo

package ibv

/*
#cgo noescape xibv_post_send
#cgo nocallback xibv_post_send
#cgo noescape xibv_post_recv
#cgo nocallback xibv_post_recv
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"syscall"
	"unsafe"
)

// QP is a queue pair (struct ibv_qp).
type QP struct {
	c    *C.struct_ibv_qp
	pd   *PD
	ring *C.struct_xibv_ring
	num  uint32
	typ  QPType
	caps QPCaps
	srq  *SRQ
	obj  string
}

func qpInitAttr(a QPInitAttr) (C.struct_ibv_qp_init_attr, error) {
	var at C.struct_ibv_qp_init_attr
	if a.SendCQ == nil || a.SendCQ.c == nil {
		return at, fmt.Errorf("SendCQ is nil or closed: %w", syscall.EINVAL)
	}
	recv := a.RecvCQ
	if recv == nil {
		recv = a.SendCQ
	}
	if recv.c == nil {
		return at, fmt.Errorf("RecvCQ is closed: %w", syscall.EINVAL)
	}
	def := func(v, d int) C.uint32_t {
		if v <= 0 {
			v = d
		}
		return C.uint32_t(min(v, math.MaxInt32))
	}
	at.send_cq = a.SendCQ.c
	at.recv_cq = recv.c
	at.cap.max_send_wr = def(a.MaxSendWR, 128)
	at.cap.max_send_sge = def(a.MaxSendSGE, 1)
	at.cap.max_inline_data = C.uint32_t(max(a.MaxInline, 0))
	if a.SRQ != nil {
		if a.SRQ.c == nil {
			return at, fmt.Errorf("SRQ is closed: %w", syscall.EINVAL)
		}
		at.srq = a.SRQ.c
	} else {
		at.cap.max_recv_wr = def(a.MaxRecvWR, 128)
		at.cap.max_recv_sge = def(a.MaxRecvSGE, 1)
	}
	switch a.Type {
	case QPTypeRC:
		at.qp_type = C.IBV_QPT_RC
	case QPTypeUC:
		at.qp_type = C.IBV_QPT_UC
	case QPTypeUD:
		at.qp_type = C.IBV_QPT_UD
	default:
		return at, fmt.Errorf("QP type %d: %w", a.Type, syscall.EINVAL)
	}
	if a.SigAll {
		at.sq_sig_all = 1
	}
	return at, nil
}

// CreateQP creates a QP in the RESET state. [QP.Caps] reports what was
// granted.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if pd == nil || pd.c == nil {
		return nil, ErrClosed
	}
	at, err := qpInitAttr(a)
	if err != nil {
		return nil, fmt.Errorf("ibv_create_qp on %s: %w", pd.ctx.name, err)
	}
	q, err := C.xibv_create_qp(pd.c, &at)
	if q == nil {
		return nil, fmt.Errorf("ibv_create_qp %s on %s: %w", a, pd.ctx.name, errnoErr(err, syscall.EINVAL))
	}
	qp, err := newQP(pd, q, &at, a)
	if err != nil {
		C.xibv_destroy_qp(q)
		return nil, err
	}
	return qp, nil
}

func newQP(pd *PD, q *C.struct_ibv_qp, at *C.struct_ibv_qp_init_attr, a QPInitAttr) (*QP, error) {
	qp := &QP{
		c:   q,
		pd:  pd,
		num: uint32(q.qp_num),
		typ: a.Type,
		srq: a.SRQ,
		caps: QPCaps{
			MaxSendWR:  int(at.cap.max_send_wr),
			MaxRecvWR:  int(at.cap.max_recv_wr),
			MaxSendSGE: int(at.cap.max_send_sge),
			MaxRecvSGE: int(at.cap.max_recv_sge),
			MaxInline:  int(at.cap.max_inline_data),
		},
	}
	qp.obj = fmt.Sprintf("QP %#x on %s", qp.num, pd.ctx.name)
	rcap := 0
	if a.SRQ == nil {
		rcap = min(max(qp.caps.MaxRecvWR, 1), maxPostBatch)
	}
	r, err := C.xibv_ring_new(C.int(min(max(qp.caps.MaxSendWR, 1), maxPostBatch)), C.int(rcap))
	if r == nil {
		return nil, fmt.Errorf("allocate the WR ring of %s: %w", qp.obj, errnoErr(err, syscall.ENOMEM))
	}
	qp.ring = r
	live.qps.Add(1)
	pd.children.Add(1)
	return qp, nil
}

// Num returns the QP number, which the peer needs to connect.
func (qp *QP) Num() uint32 {
	if qp == nil {
		return 0
	}
	return qp.num
}

// Caps returns the capacities the QP was granted.
func (qp *QP) Caps() QPCaps {
	if qp == nil {
		return QPCaps{}
	}
	return qp.caps
}

// State queries the QP's current state. Some providers do not report it:
// siw on older kernels (seen on Linux 6.1; fixed by 6.12) always answers
// QPSReset.
func (qp *QP) State() (QPState, error) {
	if qp == nil || qp.c == nil {
		return QPSUnknown, ErrClosed
	}
	var s C.int
	rc, err := C.xibv_query_qp_state(qp.c, &s)
	if e := rcErr(rc, err); e != nil {
		return QPSUnknown, fmt.Errorf("ibv_query_qp %s: %w", qp.obj, e)
	}
	return QPState(s), nil
}

// PathMTU queries the path MTU the QP was connected with, in bytes (0 when
// the provider reports none: iWARP QPs, and siw on older kernels, which
// answer every query with a QP in RESET).
func (qp *QP) PathMTU() (int, error) {
	if qp == nil || qp.c == nil {
		return 0, ErrClosed
	}
	var m C.int
	rc, err := C.xibv_query_qp_mtu(qp.c, &m)
	if e := rcErr(rc, err); e != nil {
		return 0, fmt.Errorf("ibv_query_qp %s: %w", qp.obj, e)
	}
	if m < 1 || m > 5 {
		return 0, nil
	}
	return 128 << int(m), nil
}

func (qp *QP) modify(to string, attr *C.struct_ibv_qp_attr, mask C.int) error {
	if qp == nil || qp.c == nil {
		return ErrClosed
	}
	rc, err := C.xibv_modify_qp(qp.c, attr, mask)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_modify_qp %s to %s: %w", qp.obj, to, e)
	}
	return nil
}

// ToInit moves the QP from RESET to INIT on port (default 1), allowing the
// remote side the given access.
func (qp *QP) ToInit(port int, access Access) error {
	if port <= 0 {
		port = 1
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_INIT
	attr.pkey_index = 0
	attr.port_num = C.uint8_t(port)
	attr.qp_access_flags = C.uint(access)
	return qp.modify("INIT", &attr, C.IBV_QP_STATE|C.IBV_QP_PKEY_INDEX|C.IBV_QP_PORT|C.IBV_QP_ACCESS_FLAGS)
}

// orDefault returns d for 0 and 0 for -1.
func orDefault(v, d int) int {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

// ToRTR moves the QP from INIT to RTR (ready to receive) towards the remote
// QP that a describes. iWARP QPs cannot be connected this way: use the kernel's rdma_cm
// (internal/rdmacm).
func (qp *QP) ToRTR(a RTRAttr) error {
	if qp == nil || qp.c == nil {
		return ErrClosed
	}
	ctx := qp.pd.ctx
	if ctx.transport == "iWARP" {
		return fmt.Errorf("ibv_modify_qp %s to RTR: %s is iWARP, whose QPs are connected through rdma_cm: %w",
			qp.obj, ctx.name, ErrNotSupported)
	}
	port := orDefault(a.Port, 1)
	mtu := a.PathMTU
	if mtu == 0 {
		pi, err := ctx.QueryPort(port)
		if err != nil {
			return fmt.Errorf("ibv_modify_qp %s to RTR: %w", qp.obj, err)
		}
		mtu = pi.ActiveMTU
	}
	m, err := mtuEnum(mtu)
	if err != nil {
		return fmt.Errorf("ibv_modify_qp %s to RTR: %v: %w", qp.obj, err, syscall.EINVAL)
	}
	rd := a.MaxDestRdAtomic
	if rd == 0 {
		rd = 16
		if da, err := ctx.deviceAttr(); err == nil && int(da.max_qp_rd_atom) < rd {
			rd = int(da.max_qp_rd_atom)
		}
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_RTR
	attr.path_mtu = C.enum_ibv_mtu(m)
	attr.dest_qp_num = C.uint32_t(a.RemoteQPN)
	attr.rq_psn = C.uint32_t(a.RemotePSN & 0xffffff)
	attr.max_dest_rd_atomic = C.uint8_t(max(rd, 0))
	attr.min_rnr_timer = C.uint8_t(orDefault(a.MinRNRTimer, 12))
	attr.ah_attr.dlid = C.uint16_t(a.DLID)
	attr.ah_attr.port_num = C.uint8_t(port)
	if a.IsGlobal {
		attr.ah_attr.is_global = 1
		*(*[16]byte)(unsafe.Pointer(&attr.ah_attr.grh.dgid)) = a.DGID
		attr.ah_attr.grh.sgid_index = C.uint8_t(a.SGIDIndex)
		hop := a.HopLimit
		if hop == 0 {
			hop = 64
		}
		attr.ah_attr.grh.hop_limit = C.uint8_t(hop)
	}
	return qp.modify("RTR", &attr, C.IBV_QP_STATE|C.IBV_QP_AV|C.IBV_QP_PATH_MTU|C.IBV_QP_DEST_QPN|
		C.IBV_QP_RQ_PSN|C.IBV_QP_MAX_DEST_RD_ATOMIC|C.IBV_QP_MIN_RNR_TIMER)
}

// ToRTS moves the QP from RTR to RTS (ready to send).
func (qp *QP) ToRTS(a RTSAttr) error {
	if qp == nil || qp.c == nil {
		return ErrClosed
	}
	rd := a.MaxRdAtomic
	if rd == 0 {
		rd = 16
		if da, err := qp.pd.ctx.deviceAttr(); err == nil && int(da.max_qp_init_rd_atom) < rd {
			rd = int(da.max_qp_init_rd_atom)
		}
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_RTS
	attr.sq_psn = C.uint32_t(a.PSN & 0xffffff)
	attr.timeout = C.uint8_t(orDefault(a.Timeout, 14))
	attr.retry_cnt = C.uint8_t(orDefault(a.RetryCnt, 7))
	attr.rnr_retry = C.uint8_t(orDefault(a.RNRRetry, 7))
	attr.max_rd_atomic = C.uint8_t(max(rd, 0))
	return qp.modify("RTS", &attr, C.IBV_QP_STATE|C.IBV_QP_TIMEOUT|C.IBV_QP_RETRY_CNT|C.IBV_QP_RNR_RETRY|
		C.IBV_QP_SQ_PSN|C.IBV_QP_MAX_QP_RD_ATOMIC)
}

// ModifyFromCM moves the QP to the state whose attributes the kernel's
// rdma_cm computed (kern is the struct ib_uverbs_qp_attr of
// RDMA_USER_CM_CMD_INIT_QP_ATTR, as internal/rdmacm receives it; to names
// the state in errors). maskOff clears attribute bits; destRd and rd, when
// >= 0, override max_dest_rd_atomic and max_rd_atomic.
func (qp *QP) ModifyFromCM(to string, state QPState, kern []byte, maskOff uint32, destRd, rd int) error {
	if qp == nil || qp.c == nil {
		return ErrClosed
	}
	rc, err := C.xibv_modify_qp_kern(qp.c, C.int(state), unsafe.Pointer(&kern[0]), C.uint(maskOff), C.int(destRd), C.int(rd))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_modify_qp %s to %s (attributes from rdma_cm): %w", qp.obj, to, e)
	}
	return nil
}

// Context returns the context the QP was created on, or nil.
func (qp *QP) Context() *Context {
	if qp == nil || qp.pd == nil {
		return nil
	}
	return qp.pd.ctx
}

// HasSRQ reports whether the QP receives through a shared receive queue.
func (qp *QP) HasSRQ() bool { return qp != nil && qp.srq != nil }

// ToError moves the QP to the error state: outstanding work requests
// complete with the flushed status.
func (qp *QP) ToError() error {
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_ERR
	return qp.modify("ERR", &attr, C.IBV_QP_STATE)
}

// PostSend posts wrs as one chain, in one cgo call, and returns how many were
// posted. On failure the error is a [*PostError] naming the refused WR and
// the errno. It does not allocate.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	if qp == nil || qp.c == nil {
		return 0, ErrClosed
	}
	n := len(wrs)
	if n == 0 {
		return 0, nil
	}
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	rc := C.xibv_post_send(handle(unsafe.Pointer(qp.c)), handle(unsafe.Pointer(qp.ring)), (*C.struct_xfer_send_wr)(unsafe.Pointer(&wrs[0])), C.int(n))
	if rc != 0 {
		e := ringError("ibv_post_send", qp.obj, qp.ring, rc, n)
		if e.Bad >= 0 {
			e.BadID = wrs[e.Bad].ID
		}
		return e.Posted, e
	}
	return n, nil
}

// PostRecv posts wrs to the QP's receive queue, in one cgo call. A QP with an
// SRQ has none: post to the SRQ.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp == nil || qp.c == nil {
		return 0, ErrClosed
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("ibv_post_recv on %s: the QP receives through an SRQ: %w", qp.obj, syscall.EINVAL)
	}
	n := len(wrs)
	if n == 0 {
		return 0, nil
	}
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	rc := C.xibv_post_recv(handle(unsafe.Pointer(qp.c)), handle(unsafe.Pointer(qp.ring)), (*C.struct_xfer_recv_wr)(unsafe.Pointer(&wrs[0])), C.int(n))
	if rc != 0 {
		e := ringError("ibv_post_recv", qp.obj, qp.ring, rc, n)
		if e.Bad >= 0 {
			e.BadID = wrs[e.Bad].ID
		}
		return e.Posted, e
	}
	return n, nil
}

// Close destroys the QP; outstanding work requests are lost.
func (qp *QP) Close() error {
	if qp == nil || qp.c == nil {
		return nil
	}
	rc, err := C.xibv_destroy_qp(qp.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("ibv_destroy_qp %s: %w", qp.obj, e)
	}
	C.xibv_ring_free(qp.ring)
	qp.c, qp.ring = nil, nil
	live.qps.Add(-1)
	qp.pd.children.Add(-1)
	return nil
}
