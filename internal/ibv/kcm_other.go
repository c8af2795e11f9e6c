//go:build !cgo || !linux

package ibv

import (
	"context"
	"net/netip"
	"time"
)

// KCMChannel is a channel to the kernel's rdma_cm; this build has none.
type KCMChannel struct{ _ [0]func() }

// KCMID is an ID of a KCMChannel; this build has none.
type KCMID struct{ _ [0]func() }

// KCMEvent is an event of a KCMChannel.
type KCMEvent struct {
	Type                               CMEventType
	ID                                 *KCMID
	Status                             int
	PrivateData                        []byte
	ResponderResources, InitiatorDepth int
}

// Err returns the event's status as an error.
func (e *KCMEvent) Err() error {
	ev := CMEvent{Type: e.Type, Status: e.Status}
	return ev.Err()
}

// KCMAddr is what the kernel says about a bound or resolved ID.
type KCMAddr struct {
	NodeGUID    string
	DeviceIndex int
	Port        int
	SrcPort     uint16
}

// NewKCMChannel reports that this build cannot use rdma_cm.
func NewKCMChannel() (*KCMChannel, error) { return nil, errUnsupported("open the rdma_cm device") }

// FD returns -1.
func (ch *KCMChannel) FD() int { return -1 }

// Close does nothing.
func (ch *KCMChannel) Close() error { return nil }

// CreateID reports that this build cannot use rdma_cm.
func (ch *KCMChannel) CreateID() (*KCMID, error) { return nil, errUnsupported("rdma_cm create ID") }

// WaitEvent reports that this build cannot use rdma_cm.
func (ch *KCMChannel) WaitEvent(ctx context.Context) (KCMEvent, error) {
	return KCMEvent{}, errUnsupported("rdma_cm get event")
}

// GetEvent reports that this build cannot use rdma_cm.
func (ch *KCMChannel) GetEvent(timeout time.Duration) (KCMEvent, error) {
	return KCMEvent{}, errUnsupported("rdma_cm get event")
}

func (id *KCMID) String() string { return "rdma_cm ID (not supported)" }

// Bind reports that this build cannot use rdma_cm.
func (id *KCMID) Bind(addr netip.AddrPort) error { return errUnsupported("rdma_cm bind") }

// Listen reports that this build cannot use rdma_cm.
func (id *KCMID) Listen(backlog int) error { return errUnsupported("rdma_cm listen") }

// Query reports that this build cannot use rdma_cm.
func (id *KCMID) Query() (KCMAddr, error) { return KCMAddr{}, errUnsupported("rdma_cm query") }

// Port returns 0.
func (id *KCMID) Port() uint16 { return 0 }

// OnDevice reports that this build cannot use rdma_cm.
func (id *KCMID) OnDevice(c *Context) (bool, error) { return false, errUnsupported("rdma_cm query") }

// ResolveAddrPort reports that this build cannot use rdma_cm.
func (id *KCMID) ResolveAddrPort(dst netip.AddrPort, timeout time.Duration) error {
	return errUnsupported("rdma_cm resolve address")
}

// ResolveRoute reports that this build cannot use rdma_cm.
func (id *KCMID) ResolveRoute(timeout time.Duration) error {
	return errUnsupported("rdma_cm resolve route")
}

// InitQP reports that this build cannot use rdma_cm.
func (id *KCMID) InitQP(qp *QP) error { return errUnsupported("rdma_cm init QP") }

// Connect reports that this build cannot use rdma_cm.
func (id *KCMID) Connect(qp *QP, privateData []byte, rd int) error {
	return errUnsupported("rdma_cm connect")
}

// Established reports that this build cannot use rdma_cm.
func (id *KCMID) Established(qp *QP) error { return errUnsupported("rdma_cm ready to use") }

// Accept reports that this build cannot use rdma_cm.
func (id *KCMID) Accept(qp *QP, privateData []byte, rd int) error {
	return errUnsupported("rdma_cm accept")
}

// Reject reports that this build cannot use rdma_cm.
func (id *KCMID) Reject(privateData []byte) error { return errUnsupported("rdma_cm reject") }

// Disconnect reports that this build cannot use rdma_cm.
func (id *KCMID) Disconnect() error { return errUnsupported("rdma_cm disconnect") }

// Close does nothing.
func (id *KCMID) Close() error { return nil }

// RemovalWatch tells when an RDMA device is removed; this build has none.
type RemovalWatch struct{ _ [0]func() }

// WatchRemoval reports that this build cannot watch RDMA devices.
func WatchRemoval(addr netip.Addr, c *Context) (*RemovalWatch, error) {
	return nil, errUnsupported("watch RDMA device removal")
}

// Removed returns nil: nothing is ever reported.
func (w *RemovalWatch) Removed() <-chan struct{} { return nil }

// Close does nothing.
func (w *RemovalWatch) Close() error { return nil }
