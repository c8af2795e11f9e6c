//go:build !cgo || !linux

package ibv

// MW is a memory window; this build has none.
type MW struct{ _ [0]func() }

// AllocMW reports that this build cannot use verbs.
func (pd *PD) AllocMW() (*MW, error) { return nil, errUnsupported("ibv_alloc_mw") }

// RKey returns 0.
func (mw *MW) RKey() uint32 { return 0 }

// Close does nothing.
func (mw *MW) Close() error { return nil }

// PostBindMW reports that this build cannot use verbs.
func (qp *QP) PostBindMW(id uint64, mw *MW, mr *MR, addr uintptr, n int, access Access) (uint32, error) {
	return 0, errUnsupported("ibv_post_send")
}

// PostLocalInv reports that this build cannot use verbs.
func (qp *QP) PostLocalInv(id uint64, rkey uint32) error { return errUnsupported("ibv_post_send") }
