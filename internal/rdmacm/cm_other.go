//go:build !linux

package rdmacm

import (
	"context"
	"net/netip"
	"time"

	"github.com/xferio/xfer/internal/ibv"
)

// Channel is a channel to the kernel's rdma_cm; this build has none.
type Channel struct{ _ [0]func() }

// ID is an ID of a Channel; this build has none.
type ID struct{ _ [0]func() }

// SetRetry does nothing here.
func (id *ID) SetRetry(retry, rnrRetry int) {}

// NewChannel reports that this build cannot use rdma_cm.
func NewChannel() (*Channel, error) { return nil, errUnsupported("open the rdma_cm device") }

// FD returns -1.
func (ch *Channel) FD() int { return -1 }

// Close does nothing.
func (ch *Channel) Close() error { return nil }

// CreateID reports that this build cannot use rdma_cm.
func (ch *Channel) CreateID() (*ID, error) { return nil, errUnsupported("rdma_cm create ID") }

// WaitEvent reports that this build cannot use rdma_cm.
func (ch *Channel) WaitEvent(ctx context.Context) (Event, error) {
	return Event{}, errUnsupported("rdma_cm get event")
}

// GetEvent reports that this build cannot use rdma_cm.
func (ch *Channel) GetEvent(timeout time.Duration) (Event, error) {
	return Event{}, errUnsupported("rdma_cm get event")
}

func (id *ID) String() string { return "rdma_cm ID (not supported)" }

// Bind reports that this build cannot use rdma_cm.
func (id *ID) Bind(addr netip.AddrPort) error { return errUnsupported("rdma_cm bind") }

// Listen reports that this build cannot use rdma_cm.
func (id *ID) Listen(backlog int) error { return errUnsupported("rdma_cm listen") }

// Query reports that this build cannot use rdma_cm.
func (id *ID) Query() (Addr, error) { return Addr{}, errUnsupported("rdma_cm query") }

// Port returns 0.
func (id *ID) Port() uint16 { return 0 }

// OnDevice reports that this build cannot use rdma_cm.
func (id *ID) OnDevice(c *ibv.Context) (bool, error) { return false, errUnsupported("rdma_cm query") }

// ResolveAddrPort reports that this build cannot use rdma_cm.
func (id *ID) ResolveAddrPort(dst netip.AddrPort, timeout time.Duration) error {
	return errUnsupported("rdma_cm resolve address")
}

// ResolveRoute reports that this build cannot use rdma_cm.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	return errUnsupported("rdma_cm resolve route")
}

// InitQP reports that this build cannot use rdma_cm.
func (id *ID) InitQP(qp *ibv.QP) error { return errUnsupported("rdma_cm init QP") }

// Connect reports that this build cannot use rdma_cm.
func (id *ID) Connect(qp *ibv.QP, privateData []byte, rd int) error {
	return errUnsupported("rdma_cm connect")
}

// Established reports that this build cannot use rdma_cm.
func (id *ID) Established(qp *ibv.QP) error { return errUnsupported("rdma_cm ready to use") }

// Accept reports that this build cannot use rdma_cm.
func (id *ID) Accept(qp *ibv.QP, privateData []byte, rd int) error {
	return errUnsupported("rdma_cm accept")
}

// Reject reports that this build cannot use rdma_cm.
func (id *ID) Reject(privateData []byte) error { return errUnsupported("rdma_cm reject") }

// Disconnect reports that this build cannot use rdma_cm.
func (id *ID) Disconnect() error { return errUnsupported("rdma_cm disconnect") }

// Close does nothing.
func (id *ID) Close() error { return nil }

// RemovalWatch tells when an RDMA device is removed; this build has none.
type RemovalWatch struct{ _ [0]func() }

// WatchRemoval reports that this build cannot watch RDMA devices.
func WatchRemoval(addr netip.Addr, c *ibv.Context) (*RemovalWatch, error) {
	return nil, errUnsupported("watch RDMA device removal")
}

// Removed returns nil: nothing is ever reported.
func (w *RemovalWatch) Removed() <-chan struct{} { return nil }

// Close does nothing.
func (w *RemovalWatch) Close() error { return nil }
