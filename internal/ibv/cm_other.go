//go:build !cgo || !linux

package ibv

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// CMChannel is an rdma_cm event channel; this build has none.
type CMChannel struct{ _ [0]func() }

// NewCMChannel reports that this build cannot use rdma_cm.
func NewCMChannel() (*CMChannel, error) { return nil, errUnsupported("rdma_create_event_channel") }

// FD returns -1.
func (ch *CMChannel) FD() int { return -1 }

// Close does nothing.
func (ch *CMChannel) Close() error { return nil }

// CreateID reports that this build cannot use rdma_cm.
func (ch *CMChannel) CreateID() (*CMID, error) { return nil, errUnsupported("rdma_create_id") }

// GetEvent reports that this build cannot use rdma_cm.
func (ch *CMChannel) GetEvent(timeout time.Duration) (CMEvent, error) {
	return CMEvent{}, errUnsupported("rdma_get_cm_event")
}

// WaitEvent reports that this build cannot use rdma_cm.
func (ch *CMChannel) WaitEvent(ctx context.Context) (CMEvent, error) {
	return CMEvent{}, errUnsupported("rdma_get_cm_event")
}

// CMID is an rdma_cm identifier; this build has none.
type CMID struct{ _ [0]func() }

func (id *CMID) String() string { return "CM ID (not supported)" }

// Bind reports that this build cannot use rdma_cm.
func (id *CMID) Bind(addr netip.AddrPort) error { return errUnsupported("rdma_bind_addr") }

// Listen reports that this build cannot use rdma_cm.
func (id *CMID) Listen(backlog int) error { return errUnsupported("rdma_listen") }

// Port returns 0.
func (id *CMID) Port() uint16 { return 0 }

// ResolveAddr reports that this build cannot use rdma_cm.
func (id *CMID) ResolveAddr(dst *net.TCPAddr, timeout time.Duration) error {
	return errUnsupported("rdma_resolve_addr")
}

// ResolveAddrPort reports that this build cannot use rdma_cm.
func (id *CMID) ResolveAddrPort(dst netip.AddrPort, timeout time.Duration) error {
	return errUnsupported("rdma_resolve_addr")
}

// ResolveRoute reports that this build cannot use rdma_cm.
func (id *CMID) ResolveRoute(timeout time.Duration) error {
	return errUnsupported("rdma_resolve_route")
}

// Context returns nil.
func (id *CMID) Context() *Context { return nil }

// CreateQP reports that this build cannot use rdma_cm.
func (id *CMID) CreateQP(pd *PD, a QPInitAttr) (*QP, error) {
	return nil, errUnsupported("rdma_create_qp")
}

// QP returns nil.
func (id *CMID) QP() *QP { return nil }

// Connect reports that this build cannot use rdma_cm.
func (id *CMID) Connect(privateData []byte, responderResources, initiatorDepth int) error {
	return errUnsupported("rdma_connect")
}

// Accept reports that this build cannot use rdma_cm.
func (id *CMID) Accept(privateData []byte, responderResources, initiatorDepth int) error {
	return errUnsupported("rdma_accept")
}

// Reject reports that this build cannot use rdma_cm.
func (id *CMID) Reject(privateData []byte) error { return errUnsupported("rdma_reject") }

// Disconnect reports that this build cannot use rdma_cm.
func (id *CMID) Disconnect() error { return errUnsupported("rdma_disconnect") }

// Close does nothing.
func (id *CMID) Close() error { return nil }
