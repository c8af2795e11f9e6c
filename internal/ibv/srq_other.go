//go:build !cgo || !linux

package ibv

// SRQ is a shared receive queue; this build has none.
type SRQ struct{ _ [0]func() }

// CreateSRQ reports that this build cannot use verbs.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	return nil, errUnsupported("ibv_create_srq")
}

// MaxWR returns 0.
func (srq *SRQ) MaxWR() int { return 0 }

// PostRecv reports that this build cannot use verbs.
func (srq *SRQ) PostRecv(wrs []RecvWR) error { return errUnsupported("ibv_post_srq_recv") }

// Close does nothing.
func (srq *SRQ) Close() error { return nil }
