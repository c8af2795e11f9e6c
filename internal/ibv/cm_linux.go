//go:build cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// CMChannel is an rdma_cm event channel (struct rdma_event_channel): the CM
// IDs created on it report their events there.
type CMChannel struct {
	c *C.struct_rdma_event_channel
	w *fdWaiter

	mu  sync.Mutex
	ids map[*C.struct_rdma_cm_id]*CMID
}

// NewCMChannel creates an rdma_cm event channel. It loads librdmacm.so.1 on
// first use; without it the error wraps [ErrNotSupported] and names the
// package to install.
func NewCMChannel() (*CMChannel, error) {
	if err := LoadCM(); err != nil {
		return nil, err
	}
	c, err := C.xcm_create_event_channel()
	if c == nil {
		e := errnoErr(err, syscall.ENODEV)
		hint := ""
		if e == syscall.ENODEV || e == syscall.ENOENT {
			hint = " (is the rdma_ucm module loaded? `modprobe rdma_ucm`)"
		}
		return nil, fmt.Errorf("rdma_create_event_channel%s: %w", hint, e)
	}
	w, err := newFDWaiter(int(c.fd), "rdma_cm event channel")
	if err != nil {
		C.xcm_destroy_event_channel(c)
		return nil, fmt.Errorf("rdma_create_event_channel: %w", err)
	}
	live.cmchannels.Add(1)
	return &CMChannel{c: c, w: w, ids: map[*C.struct_rdma_cm_id]*CMID{}}, nil
}

// FD returns the channel's file descriptor, which is non-blocking.
func (ch *CMChannel) FD() int {
	if ch == nil || ch.c == nil {
		return -1
	}
	return int(ch.c.fd)
}

// Close destroys the channel and wakes a waiter with ErrClosed. It fails,
// and the channel stays open, while CM IDs on it are open.
func (ch *CMChannel) Close() error {
	if ch == nil || ch.c == nil {
		return nil
	}
	ch.mu.Lock()
	n := len(ch.ids)
	ch.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("rdma_destroy_event_channel: %d CM IDs are still open: %w", n, syscall.EBUSY)
	}
	ch.w.close()
	C.xcm_destroy_event_channel(ch.c)
	ch.c = nil
	live.cmchannels.Add(-1)
	return nil
}

// CreateID creates a CM ID for reliable connections (RDMA_PS_TCP).
func (ch *CMChannel) CreateID() (*CMID, error) {
	if ch == nil || ch.c == nil {
		return nil, ErrClosed
	}
	c, err := C.xcm_create_id(ch.c)
	if c == nil {
		return nil, fmt.Errorf("rdma_create_id: %w", errnoErr(err, syscall.ENOMEM))
	}
	return ch.track(c), nil
}

func (ch *CMChannel) track(c *C.struct_rdma_cm_id) *CMID {
	id := &CMID{c: c, ch: ch}
	ch.mu.Lock()
	ch.ids[c] = id
	ch.mu.Unlock()
	live.cmids.Add(1)
	return id
}

// GetEvent waits up to timeout (no limit if timeout <= 0) for the next
// event. It copies the event, private data included, acknowledges it, and
// wraps the new CM ID of a CONNECT_REQUEST. After the timeout the error
// matches os.ErrDeadlineExceeded.
func (ch *CMChannel) GetEvent(timeout time.Duration) (CMEvent, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	return ch.wait(context.Background(), deadline)
}

// WaitEvent is GetEvent that gives up when ctx ends.
func (ch *CMChannel) WaitEvent(ctx context.Context) (CMEvent, error) {
	return ch.wait(ctx, time.Time{})
}

func (ch *CMChannel) wait(ctx context.Context, deadline time.Time) (CMEvent, error) {
	if ch == nil || ch.c == nil {
		return CMEvent{}, ErrClosed
	}
	var ev C.struct_xcm_event
	err := ch.w.wait(ctx, deadline, func() (bool, error) {
		rc, err := C.xcm_get_event(ch.c, &ev)
		if rc == 0 {
			return true, nil
		}
		if e := errnoErr(err, syscall.EIO); e != syscall.EAGAIN {
			return true, e
		}
		return false, nil
	})
	if err != nil {
		return CMEvent{}, fmt.Errorf("rdma_get_cm_event: %w", err)
	}
	e := CMEvent{Type: CMEventType(ev.event), Status: int(ev.status)}
	if n := int(ev.private_data_len); n > 0 {
		e.PrivateData = bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&ev.private_data[0])), n))
	}
	if e.Type == CMEventConnectRequest {
		e.ID = ch.track(ev.id)
	}
	ch.mu.Lock()
	if e.ID == nil {
		e.ID = ch.ids[ev.id]
	}
	if ev.listen_id != nil {
		e.Listen = ch.ids[ev.listen_id]
	}
	ch.mu.Unlock()
	return e, nil
}

// CMID is an rdma_cm identifier (struct rdma_cm_id): a listener, or one end
// of a connection.
type CMID struct {
	c  *C.struct_rdma_cm_id
	ch *CMChannel
	qp *QP
}

func (id *CMID) String() string {
	if id == nil || id.c == nil {
		return "CM ID (closed)"
	}
	return fmt.Sprintf("CM ID %p", id.c)
}

// sockaddr splits an address into what xcm_* want.
func sockaddr(a netip.Addr) (family C.int, ip [16]byte, scope C.uint32_t, err error) {
	if !a.IsValid() {
		return 0, ip, 0, fmt.Errorf("invalid address: %w", syscall.EINVAL)
	}
	if a.Is4() || a.Is4In6() {
		v4 := a.Unmap().As4()
		copy(ip[:], v4[:])
		return syscall.AF_INET, ip, 0, nil
	}
	ip = a.As16()
	if z := a.Zone(); z != "" {
		ifi, err := net.InterfaceByName(z)
		if err != nil {
			return 0, ip, 0, err
		}
		scope = C.uint32_t(ifi.Index)
	}
	return syscall.AF_INET6, ip, scope, nil
}

func (id *CMID) check() error {
	if id == nil || id.c == nil {
		return ErrClosed
	}
	return nil
}

// Bind binds the ID to a local address (and through it to an RDMA
// device); port 0 picks a free port, see Port.
func (id *CMID) Bind(addr netip.AddrPort) error {
	if err := id.check(); err != nil {
		return err
	}
	fam, ip, scope, err := sockaddr(addr.Addr())
	if err != nil {
		return fmt.Errorf("rdma_bind_addr %s: %w", addr, err)
	}
	rc, err := C.xcm_bind_addr(id.c, fam, (*C.uint8_t)(&ip[0]), C.uint16_t(addr.Port()), scope)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_bind_addr %s: %w", addr, e)
	}
	return nil
}

// Listen starts listening for connections on the bound address; each
// arrives on the channel as a CMEventConnectRequest with a new ID.
func (id *CMID) Listen(backlog int) error {
	if err := id.check(); err != nil {
		return err
	}
	rc, err := C.xcm_listen(id.c, C.int(backlog))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_listen: %w", e)
	}
	return nil
}

// Port returns the local port the ID is bound to.
func (id *CMID) Port() uint16 {
	if id.check() != nil {
		return 0
	}
	return uint16(C.xcm_src_port(id.c))
}

func timeoutMS(d time.Duration) C.int {
	if d <= 0 {
		return 2000
	}
	return C.int(min(d.Milliseconds(), 1<<30))
}

// ResolveAddr starts resolving dst to an RDMA device and address; the
// channel reports CMEventAddrResolved or CMEventAddrError. timeout defaults
// to 2 s.
func (id *CMID) ResolveAddr(dst *net.TCPAddr, timeout time.Duration) error {
	if dst == nil {
		return fmt.Errorf("rdma_resolve_addr: nil address: %w", syscall.EINVAL)
	}
	return id.ResolveAddrPort(dst.AddrPort(), timeout)
}

// ResolveAddrPort is ResolveAddr for a netip.AddrPort.
func (id *CMID) ResolveAddrPort(dst netip.AddrPort, timeout time.Duration) error {
	if err := id.check(); err != nil {
		return err
	}
	fam, ip, scope, err := sockaddr(dst.Addr())
	if err != nil {
		return fmt.Errorf("rdma_resolve_addr %s: %w", dst, err)
	}
	rc, err := C.xcm_resolve_addr(id.c, fam, (*C.uint8_t)(&ip[0]), C.uint16_t(dst.Port()), scope, timeoutMS(timeout))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_resolve_addr %s: %w", dst, e)
	}
	return nil
}

// ResolveRoute starts resolving the route to the resolved address; the
// channel reports CMEventRouteResolved or CMEventRouteError.
func (id *CMID) ResolveRoute(timeout time.Duration) error {
	if err := id.check(); err != nil {
		return err
	}
	rc, err := C.xcm_resolve_route(id.c, timeoutMS(timeout))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_resolve_route: %w", e)
	}
	return nil
}

// Context returns the device the ID is bound to (after Bind, ResolveAddr, or
// for the ID of a CONNECT_REQUEST), or nil. The context belongs to
// librdmacm: allocate PDs and CQs on it, but its Close does nothing. Every ID
// on the same device returns the same *Context.
func (id *CMID) Context() *Context {
	if id.check() != nil {
		return nil
	}
	return borrowContext(id.c.verbs)
}

// CreateQP creates the ID's QP with rdma_create_qp; pd must come from the
// ID's Context. rdma_cm moves the QP through its states on Connect and
// Accept. The QP belongs to the ID: Close of either destroys it.
func (id *CMID) CreateQP(pd *PD, a QPInitAttr) (*QP, error) {
	if err := id.check(); err != nil {
		return nil, err
	}
	if pd == nil || pd.c == nil {
		return nil, fmt.Errorf("rdma_create_qp: PD: %w", ErrClosed)
	}
	if id.qp != nil {
		return nil, fmt.Errorf("rdma_create_qp: the CM ID already has a QP: %w", syscall.EEXIST)
	}
	if id.c.verbs == nil || pd.ctx.c != id.c.verbs {
		return nil, fmt.Errorf("rdma_create_qp on %s: the PD is not from the CM ID's device "+
			"(allocate it on CMID.Context()): %w", pd.ctx.name, syscall.EINVAL)
	}
	at, err := qpInitAttr(a)
	if err != nil {
		return nil, fmt.Errorf("rdma_create_qp on %s: %w", pd.ctx.name, err)
	}
	rc, err := C.xcm_create_qp(id.c, pd.c, &at)
	if e := rcErr(rc, err); e != nil {
		return nil, fmt.Errorf("rdma_create_qp %s on %s: %w", a, pd.ctx.name, e)
	}
	qp, err := newQP(pd, id.c.qp, &at, a, id)
	if err != nil {
		C.xcm_destroy_qp(id.c)
		return nil, err
	}
	id.qp = qp
	return qp, nil
}

// QP returns the QP made by CreateQP, or nil.
func (id *CMID) QP() *QP {
	if id == nil {
		return nil
	}
	return id.qp
}

func pdata(b []byte) (unsafe.Pointer, C.int, error) {
	if len(b) > 255 {
		return nil, 0, fmt.Errorf("%d bytes of private data, at most 255 fit: %w", len(b), syscall.EINVAL)
	}
	if len(b) == 0 {
		return nil, 0, nil
	}
	return unsafe.Pointer(&b[0]), C.int(len(b)), nil
}

// Connect connects to the resolved route with the ID's QP. responderResources
// is how many RDMA READs the peer may have outstanding against us,
// initiatorDepth how many we may have against it. The channel reports
// CMEventEstablished, CMEventRejected, CMEventUnreachable or
// CMEventConnectError. Private data: at most 56 bytes on InfiniBand and
// RoCE.
func (id *CMID) Connect(privateData []byte, responderResources, initiatorDepth int) error {
	if err := id.check(); err != nil {
		return err
	}
	p, n, err := pdata(privateData)
	if err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	rc, err := C.xcm_connect(id.c, p, n, C.int(responderResources), C.int(initiatorDepth))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_connect: %w", e)
	}
	return nil
}

// Accept accepts the connection request the ID was created for, with the
// ID's QP. Private data: at most 196 bytes on InfiniBand and RoCE.
func (id *CMID) Accept(privateData []byte, responderResources, initiatorDepth int) error {
	if err := id.check(); err != nil {
		return err
	}
	p, n, err := pdata(privateData)
	if err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	rc, err := C.xcm_accept(id.c, p, n, C.int(responderResources), C.int(initiatorDepth))
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_accept: %w", e)
	}
	return nil
}

// Reject refuses the connection request the ID was created for. Close the
// ID afterwards.
func (id *CMID) Reject(privateData []byte) error {
	if err := id.check(); err != nil {
		return err
	}
	p, n, err := pdata(privateData)
	if err != nil {
		return fmt.Errorf("rdma_reject: %w", err)
	}
	rc, err := C.xcm_reject(id.c, p, n)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_reject: %w", e)
	}
	return nil
}

// Disconnect tears the connection down; both ends get
// CMEventDisconnected, and the QP moves to the error state.
func (id *CMID) Disconnect() error {
	if err := id.check(); err != nil {
		return err
	}
	rc, err := C.xcm_disconnect(id.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_disconnect: %w", e)
	}
	return nil
}

// Close destroys the ID's QP, if any, and the ID.
func (id *CMID) Close() error {
	if id == nil || id.c == nil {
		return nil
	}
	if id.qp != nil {
		if err := id.qp.Close(); err != nil {
			return err
		}
	}
	rc, err := C.xcm_destroy_id(id.c)
	if e := rcErr(rc, err); e != nil {
		return fmt.Errorf("rdma_destroy_id: %w", e)
	}
	id.ch.mu.Lock()
	delete(id.ch.ids, id.c)
	id.ch.mu.Unlock()
	id.c = nil
	live.cmids.Add(-1)
	return nil
}
