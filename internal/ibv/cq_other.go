//go:build !cgo || !linux

package ibv

import (
	"context"
	"time"
)

// CompChannel is a completion event channel; this build has none.
type CompChannel struct{ _ [0]func() }

// CreateCompChannel reports that this build cannot use verbs.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	return nil, errUnsupported("ibv_create_comp_channel")
}

// FD returns -1.
func (ch *CompChannel) FD() int { return -1 }

// GetEvent reports that this build cannot use verbs.
func (ch *CompChannel) GetEvent() (*CQ, error) { return nil, errUnsupported("ibv_get_cq_event") }

// WaitEvent reports that this build cannot use verbs.
func (ch *CompChannel) WaitEvent(ctx context.Context) (*CQ, error) {
	return nil, errUnsupported("ibv_get_cq_event")
}

// GetEventTimeout reports that this build cannot use verbs.
func (ch *CompChannel) GetEventTimeout(timeout time.Duration) (*CQ, error) {
	return nil, errUnsupported("ibv_get_cq_event")
}

// Close does nothing.
func (ch *CompChannel) Close() error { return nil }

// CQ is a completion queue; this build has none.
type CQ struct{ _ [0]func() }

// CreateCQ reports that this build cannot use verbs.
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	return nil, errUnsupported("ibv_create_cq")
}

// CQE returns 0.
func (cq *CQ) CQE() int { return 0 }

// Poll reports that this build cannot use verbs.
func (cq *CQ) Poll(wcs []WC) (int, error) { return 0, errUnsupported("ibv_poll_cq") }

// ReqNotify reports that this build cannot use verbs.
func (cq *CQ) ReqNotify(solicitedOnly bool) error { return errUnsupported("ibv_req_notify_cq") }

// AckEvents does nothing.
func (cq *CQ) AckEvents(n int) {}

// Close does nothing.
func (cq *CQ) Close() error { return nil }
